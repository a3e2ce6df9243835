"""The verdict benchmark: how often the verdict is right, against truth measured without the profiler.

bench.py runs it (``python scripts/verdict_bench.py``); the scenario sets are gpu.py (the main GPU set),
holdout.py (families the analysis was never fitted on), cpu.py (the CPU subset), ddp.py (multi-rank, under
torchrun), lightning.py (a Lightning run) and loops.py (the sets as plain user loops, stepscope.schedule +
stepscope.trace_handler); truth.py measures the truth, score.py scores the verdicts.
"""
