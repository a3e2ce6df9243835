"""The verdict benchmark: how often the verdict is right, against truth measured without the profiler.

bench.py runs it (``python scripts/verdict_bench.py``); the scenario sets are gpu.py (the main GPU set),
holdout.py (families the analysis was never fitted on), cpu.py (the CPU subset), ddp.py (multi-rank, under
torchrun) and lightning.py (a Lightning run); truth.py measures the truth, score.py scores the verdicts.
"""
