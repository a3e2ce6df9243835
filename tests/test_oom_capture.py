"""An out-of-memory error raised inside a profiled loop: captured under <dir>/oom/ before it propagates, and
propagated unchanged (in this process through stepscope.profile's exit; in a child process where it ends the
process). On this CPU machine the failure is simulated (torch.OutOfMemoryError raised in the loop,
with the message torch's caching allocator writes); the allocator snapshot is then absent, and said to be.

    python -m pytest -q -p no:xdist tests/test_oom_capture.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
           "1.10 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use. Of the "
           "allocated memory {allocated} GiB is allocated by PyTorch, and {unallocated} GiB is reserved by PyTorch "
           "but unallocated.")

LOOPS = {
    # stepscope.profile: the error passes through its exit
    "profile": """
        with stepscope.profile(out, wait=5, warmup=1, active=2, skip_first=0, capture_on_slowdown=False) as prof:
            for i in range(24):
                step(i)
                prof.step()
    """,
    # the user's own torch.profiler.profile with stepscope.schedule and trace_handler: the error ends the process
    "handler": """
        sched = stepscope.schedule(wait=5, warmup=1, active=2)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                    on_trace_ready=stepscope.trace_handler(out)) as prof:
            for i in range(24):
                step(i)
                prof.step()
    """,
}


def _script(loop: str, message: str) -> str:
    """The loop as a program whose global `out` names the directory to profile into."""
    return textwrap.dedent("""
        import torch, stepscope
        m = torch.nn.Linear(64, 64)
        def step(i):
            m(torch.randn(8, 64)).sum().backward()
            if i == 14:  # the first step recorded by the second cycle; the first was written and analysed
                raise torch.OutOfMemoryError(MESSAGE)
    """).replace("MESSAGE", repr(message)) + textwrap.dedent(loop)


@pytest.mark.parametrize(("loop", "allocated", "unallocated", "cause"),
                         [("profile", "70.50", "6.90", "step_too_large"), ("handler", "50.00", "27.40", "fragmentation")])
def test_an_oom_in_the_loop_is_captured_and_reraised_unchanged(tmp_path, loop, allocated, unallocated, cause):
    message = MESSAGE.format(allocated=allocated, unallocated=unallocated)
    code = _script(LOOPS[loop], message)
    if loop == "handler":  # the error ends the process: the capture is written from sys.excepthook
        r = subprocess.run([sys.executable, "-c", f"import sys\nout = sys.argv[1]\n{code}", str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 1
        assert f"torch.OutOfMemoryError: {message}" in r.stderr  # the user's error, as it was raised
    else:  # the error passes through stepscope.profile's exit: the loop runs in this process
        import torch

        with pytest.raises(torch.OutOfMemoryError) as caught:
            exec(compile(code, "<loop>", "exec"), {"out": str(tmp_path)})
        # the user's error, as it was raised: its type and message, and raised last by the loop's step
        assert type(caught.value) is torch.OutOfMemoryError and str(caught.value) == message
        assert caught.traceback[-1].name == "step", caught.traceback
    captures = sorted((tmp_path / "oom").iterdir())
    assert len(captures) == 1
    info = json.loads((captures[0] / "oom.json").read_text())
    assert info["error"] == {"type": "torch.OutOfMemoryError", "message": message}
    assert info["figures"]["requested"] == 2 << 30
    assert info["snapshot"] is None and "CUDA is not available" in info["snapshot_note"]
    assert not (captures[0] / "snapshot.pickle").exists()
    assert info["diagnosis"]["cause"] == cause
    md = (captures[0] / "diagnosis.md").read_text()
    assert f"Likely cause: {cause}" in md and "No snapshot" in md
    assert f"{float(allocated):.2f} GiB was allocated by tensors" in md
    if cause == "fragmentation":
        assert "expandable_segments:True" in md
    assert not list(captures[0].glob(".tmp-*"))  # nothing half-written


def test_live_blocks_name_the_allocation_site_outside_torch():
    """A snapshot's blocks as torch.cuda.memory._snapshot() gives them with memory history on: the site is the
    innermost frame outside torch, `python -c`'s "<string>" included; stacks are said when frames exist."""
    from stepscope.capture.oom import live_blocks

    frames = [{"filename": "/x/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
              {"filename": "<string>", "line": 7, "name": "<module>"}]
    snap = {"segments": [{"blocks": [{"size": 4096, "state": "active_allocated", "frames": frames},
                                     {"size": 1024, "state": "active_allocated", "frames": []},
                                     {"size": 512, "state": "inactive"}]}]}
    live = live_blocks(snap)
    assert live["stacks"] and live["active_bytes"] == 5120 and live["inactive_bytes"] == 512
    assert live["largest"] == [{"bytes": 4096, "where": "<string>:7 <module>"}, {"bytes": 1024, "where": None}]
    assert live["by_place"] == [("<string>:7 <module>", 4096)]
    assert not live_blocks({"segments": [{"blocks": [{"size": 8, "state": "active_allocated"}]}]})["stacks"]
