"""The memory of every step made at once (analysis/memory.py's ``_device_steps``), held to the same rules read
one step at a time (tests/reference/step_memory.py): on generated devices, and on every committed trace with
[memory] events.

    python -m pytest -q -p no:xdist tests/test_memory_steps.py
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference.step_memory import OpOwners, device_steps, step_phases
from stepscope.analysis import memory
from stepscope.analysis.events import MemoryColumns
from stepscope.analysis.report import parse_path
from stepscope.analysis.steps import StepWindow, step_windows

DATA = Path(__file__).parent / "data"


class _Owners:
    """An owner for each time that depends on the thread and the time alone, as the trace's are; it counts the
    times it is asked about, so a test sees that each block is asked about once."""

    def __init__(self, named: bool = True) -> None:
        self.asked = 0
        self.named = named

    def __bool__(self) -> bool:
        return self.named

    def owners(self, tid, ts: np.ndarray) -> list:
        self.asked += len(ts)
        return [None if t % 5 < 1 and self.named else f"op{tid}.{int(t) % 3}" for t in ts.tolist()]


def _window(number: int, start: float, end: float) -> StepWindow:
    return StepWindow(number, start, end, start, end, np.zeros(0, dtype=np.int64), ())


@st.composite
def _devices(draw):
    """A device's samples (sorted by time, as _Device.of makes them; times with ties), step windows over them
    (some adjacent, sharing a sample at their boundary, some empty) and each window's phases."""
    n = draw(st.integers(0, 60))
    ts = np.sort(np.array(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)), dtype=np.float64))
    nbytes = np.array(draw(st.lists(st.sampled_from([-64, -8, 0, 8, 64, 512]), min_size=n, max_size=n)),
                      dtype=np.int64)
    total = 1000 + np.cumsum(nbytes)
    reserved = total + np.array(draw(st.lists(st.integers(0, 100), min_size=n, max_size=n)), dtype=np.int64)
    addr = np.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), dtype=np.int64)
    threads = draw(st.sampled_from([[], ["main", "backward"]]))
    tid = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=np.int64)
    if not threads:
        tid = tid + 7  # threads as numbers: their own codes
    dev = memory._Device(ts, total, reserved, nbytes, addr, tid, threads)
    cuts = sorted(draw(st.lists(st.integers(0, 42), min_size=2, max_size=12)))
    windows, phases = [], []
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        windows.append(_window(k + 1, float(a), float(b)))
        optim = sorted(draw(st.lists(st.tuples(st.integers(a, b), st.integers(0, 8)), max_size=3)))
        optim = [(float(s), float(s + d)) for s, d in optim]
        back = draw(st.one_of(st.none(), st.tuples(st.integers(a, b), st.integers(0, 10))))
        b0, b1 = (None, None) if back is None else (float(back[0]), float(back[0] + back[1]))
        phases.append((b0, b1, optim))
    return dev, windows, phases


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_devices(), st.booleans())
def test_every_step_at_once_is_each_step_alone(case, named):
    """Peaks, their phase, composition, reserved figures, the largest block, and the live blocks' owners and
    modules in the same order (ties sorted alike), on any samples and windows."""
    dev, windows, phases = case
    owners, modules = _Owners(), _Owners(named)
    batched = memory._device_steps(dev, windows, phases, owners, modules)
    assert batched == device_steps(dev, windows, phases, _Owners(), _Owners(named))


def test_a_block_allocated_again_without_a_free_keeps_its_first_place():
    """An address allocated twice with no free between (a free the trace missed) is one block, the last
    allocation's, at the place of the first: the owners of tied bytes are listed in that order."""
    ts = np.arange(6, dtype=np.float64)
    nbytes = np.array([8, 8, 8, -8, 8, 8], dtype=np.int64)  # address 1 taken twice; 0 freed and taken again
    addr = np.array([1, 2, 1, 0, 0, 3], dtype=np.int64)
    total = 1000 + np.cumsum(nbytes)
    dev = memory._Device(ts, total, total, nbytes, addr, np.array([0, 0, 1, 0, 1, 1]), ["a", "b"])

    class Owners:
        def __bool__(self):
            return False

        def owners(self, tid, ts):
            return [f"{tid}{int(t)}" for t in ts.tolist()]

    step = memory._device_steps(dev, [_window(1, -1.0, 10.0)], [(None, None, [])], Owners(), Owners())[0]
    # live at the peak, in the order a walk meets their addresses: 1 (taken at 0, last by b at 2), 2, 0, 3;
    # so thread b first, then a; each block owned where it was last allocated
    assert step.top == (("b2", 8), ("b4", 8), ("b5", 8), ("a1", 8))
    assert step.top == device_steps(dev, [_window(1, -1.0, 10.0)], [(None, None, [])], Owners(), Owners())[0].top


TRACES = sorted(str(Path(p).relative_to(DATA)) for p in glob.glob(str(DATA / "**" / "*.pt.trace.json*"),
                                                                     recursive=True))


@pytest.mark.parametrize("name", TRACES)
def test_the_committed_traces_memory_is_the_same_step_by_step(name):
    """Every committed trace's steps' phases, and its devices, step by step through the oracle, as
    memory_devices makes them (a trace recorded without profile_memory has none); and the owners of its
    allocations, as the rule names them one time at a time (_owners_are_the_rules)."""
    trace = parse_path(DATA / name, "w", "s")
    assert not isinstance(trace, Exception), trace
    _owners_are_the_rules(trace)
    windows = step_windows(trace)
    assert memory._phases(trace, windows) == step_phases(trace, windows)
    found = memory.memory_devices(trace, windows)
    assert bool(found.devices) == bool(trace.memory)
    cols = MemoryColumns.of(trace.memory)
    kind = np.asarray(cols.field("device_type"), dtype=np.int64)
    phases = memory._phases(trace, windows)
    for d in found.devices:
        rows = (np.flatnonzero(kind == 0) if d.device == "cpu"
                else np.flatnonzero((kind != 0) & (np.asarray(cols.field("device_id")) == int(d.device[5:]))))
        dev = memory._Device.of(cols, rows)
        steps = device_steps(dev, windows, phases, memory._Owners(trace), memory._Modules(trace))
        assert d.steps == tuple(steps)


def _owners_are_the_rules(trace) -> None:
    """Each thread's allocations, and times at, just before and inside its ops' bounds (where the op begun last
    has ended, and the owner is looked for around it), are owned by the op that the rule names, one time at a
    time (reference.step_memory.OpOwners)."""
    cols, owners, reference = memory.op_columns(trace), memory._Owners(trace), OpOwners(trace)
    memory_ts = np.asarray(MemoryColumns.of(trace.memory).field("ts"), dtype=np.float64) if trace.memory else []
    rng = np.random.default_rng(0)
    for tid, code in cols.threads.items():
        mine = np.flatnonzero(cols.thread == code)
        bounds = np.concatenate([cols.start[mine], cols.end[mine]])
        times = np.concatenate([bounds, bounds - 0.5, (cols.start[mine] + cols.end[mine]) / 2, memory_ts])
        times = np.sort(rng.choice(times, size=min(len(times), 300), replace=False))
        assert owners.owners(tid, times).tolist() == [reference.owner(tid, t) for t in times.tolist()]
    assert owners.owners("no such thread", np.array([1.0, 2.0])).tolist() == ["(no op)", "(no op)"]
