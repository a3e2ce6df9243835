"""CUPTI detached after each profiling cycle, so that the loop runs at its own speed between cycles.

    detach_after_cycles(wait=50, repeat=0)   # before the first profiler starts: TEARDOWN_CUPTI=1 unless set

Kineto keeps CUPTI attached to the process after a cycle that recorded CUDA activity unless the environment
says TEARDOWN_CUPTI=1, and every later kernel launch pays for it. Measured on an H100 (torch 2.11.0+cu130,
BENCHMARKS.md): a launch-bound ResNet-18 loop took 1.26x and 3,000 tiny elementwise ops 1.48x as long per step
after one cycle as before it; with the variable set, 0.84x and 1.03x. That cost lands in the steps that
stepscope.schedule times as "the loop without the profiler", and in the user's training. Set after torch is
imported and before the first profiler starts, it takes effect: the trainer does exactly that, and its +23%
after a cycle went to +1% (BENCHMARKS.md, "Profiler overhead"). torch sets it back to 0 itself where CUDA graphs
make the teardown unsafe on its CUDA version; a value the user set is left alone.

Not where cycles follow each other with no step between them (``wait=0`` and more than one cycle). Kineto
tears CUPTI down at the first CUDA call after a cycle; the next cycle has started by then, and the teardown
leaves it with no GPU events at all. Measured on the H100 (tests/test_schedule_cuda.py): with wait=0 and three
cycles, the second recorded 0 kernels of 160 (all three recorded them with wait >= 1, or without the teardown).
Back-to-back cycles leave no unprofiled steps between them to protect, only those after the last one.
"""

from __future__ import annotations

import os

VARIABLE = "TEARDOWN_CUPTI"


def back_to_back(wait: int, repeat: int) -> bool:
    """Whether a schedule's cycles follow each other with no step between them."""
    return wait == 0 and repeat != 1


def detach_after_cycles(wait: int, repeat: int) -> None:
    """Ask Kineto to tear CUPTI down after each cycle of a schedule of ``wait`` and ``repeat`` (as
    torch.profiler.schedule takes them), unless its cycles are back to back or the environment already says
    either way."""
    if not back_to_back(wait, repeat):
        os.environ.setdefault(VARIABLE, "1")


KINETO_QUIET = "6"  # above Kineto's highest log level (USDT = 5): it prints nothing


def quiet_kineto(has_gpu: bool) -> None:
    """On a machine without a GPU, keep Kineto's own log lines out of the user's terminal, unless the environment
    already says a level. A CUDA build of torch on a machine without a GPU driver: Kineto still asks CUDA for the
    device count when it writes a trace, and logs "ERROR: gpuGetDeviceCount failed with code 35" (no driver),
    plus "USDT: profiler_start/stop" at each cycle, into the loop's output (a progress bar's included). A CPU
    trace has nothing device-related to say. KINETO_LOG_LEVEL is read when Kineto starts, i.e. when the
    process's first profiler is entered: call this before that (stepscope.schedule and stepscope.trace_handler
    are built before the profiler that takes them)."""
    if not has_gpu:
        os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)
