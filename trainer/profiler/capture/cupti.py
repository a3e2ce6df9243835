"""CUPTI detached after each profiling cycle, so that the loop runs at its own speed between cycles.

    detach_after_cycles()      # before the first profiler starts: TEARDOWN_CUPTI=1 unless the user set it

Kineto keeps CUPTI attached to the process after a cycle that recorded CUDA activity unless the environment
says TEARDOWN_CUPTI=1, and every later kernel launch pays for it. Measured on an H100 (torch 2.11.0+cu130,
BENCHMARKS.md): a launch-bound ResNet-18 loop took 1.26x and 3,000 tiny elementwise ops 1.48x as long per step
after one cycle as before it; with the variable set, 0.84x and 1.03x. That cost lands in the steps that
stepscope.schedule times as "the loop without the profiler", and in the user's training. Set after torch is
imported and before the first profiler starts, it takes effect: the trainer does exactly that, and its +23%
after a cycle went to +1% (BENCHMARKS.md, "Profiler overhead"). torch sets it back to 0 itself where CUDA graphs
make the teardown unsafe on its CUDA version; a value the user set is left alone.
"""

from __future__ import annotations

import os

VARIABLE = "TEARDOWN_CUPTI"


def detach_after_cycles() -> None:
    """Ask Kineto to tear CUPTI down after each cycle, unless the environment already says either way."""
    os.environ.setdefault(VARIABLE, "1")
