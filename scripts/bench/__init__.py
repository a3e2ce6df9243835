"""Benchmarks, recorders and benchmark fixtures; scripts/ holds their commands (one thin entry point each).

    workloads.py       the workload library: `Workload` (a training step with one injected cause), `TinyOps`,
                       and their parts (slow dataset, decoder, batch makers, losses, models)
    verdicts/          the verdict benchmark (scripts/verdict_bench.py): truth, score, the gpu / holdout / cpu
                       sets, ddp (multi-rank, under torchrun), lightning (scripts/record_lightning.py) and loops
                       (the sets as plain user loops, scripts/verdict_loops.py)
    scenarios.py       the traces under tests/data (scripts/record_scenarios.py)
    ddp_scenario.py    the 2-rank gloo trace under tests/data/ddp_gloo (scripts/record_ddp_scenario.py)
    ranks.py           an N-rank job built from real traces, with stragglers of a known cause
    rank_scaling.py    analysis time and memory of such jobs vs ranks and workers (scripts/bench_ranks.py)
    analysis_speed.py  analysis time and memory on replicas of a real trace (scripts/bench_analysis.py)
    memory.py          time and peak memory of a command and its child processes
    ops.py             the elementwise ops against PyTorch (scripts/bench_ops.py); step_ops.py, ops_processes.py:
                       the ops inside a training step and in whole training runs
    telemetry.py       the trainer's per-step telemetry cost (scripts/bench_telemetry.py)
    schedule.py        what stepscope.schedule and stepscope.loader cost a loop (scripts/bench_schedule.py)
    overhead.py        the profiler's overhead on real training runs (scripts/profiler_overhead.py)
    calibration.py     the overhead model's predicted vs measured unprofiled step (scripts/calibrate_overhead.py)
    tab_speed.py       how long the stepscope tab takes on a large run (scripts/bench_tab.py)
    ddp_scaling.py     images/s from 1 to N GPUs (scripts/ddp_scaling.py)
    plugin_view.py     what TensorBoard's PyTorch Profiler tab shows for a run (scripts/plugin_check.py)
    cifar_folder.py    a CIFAR-10 folder of random images (scripts/make_cifar_folder.py)
    same_reports.py    this checkout's reports and exports against another commit's (scripts/same_reports.py)

Importing this package imports nothing, and puts scripts/ on PYTHONPATH for the benchmarks' child processes;
torch comes with the modules that need it.
"""

import os as _os
from pathlib import Path as _Path

SCRIPTS = _Path(__file__).resolve().parents[1]  # scripts/: where `import bench` resolves
REPO = SCRIPTS.parent  # the checkout: the default root of every data path (tests/data, logs/)

# Children started as `python -m bench.…` (and torchrun's workers) find this package as their parent did.
_os.environ["PYTHONPATH"] = _os.pathsep.join(p for p in (str(SCRIPTS), _os.environ.get("PYTHONPATH", "")) if p)
