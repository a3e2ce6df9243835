"""The one worker policy (trace/workers.py): a training process never forks; the command line may.

    python -m pytest -q tests/test_workers.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from stepscope.report.front import analyze
from stepscope.trace import workers as policy
from stepscope.trace.workers import Workers

DATA = Path(__file__).parent / "data"
NCCL = DATA / "nccl_ddp"  # two ranks of one job


def _no_fork(*args):
    raise AssertionError("a process pool was made")


def test_inline_parses_large_runs_in_this_process(monkeypatch):
    local = analyze(NCCL, workers=Workers.local(cpus=2)).to_dict()  # small traces: parsed here
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(policy, "fork_pool", _no_fork)
    assert analyze(NCCL, workers=Workers.inline()).to_dict() == local
    assert analyze(NCCL).to_dict() == local  # the default: a training process's call
    with pytest.raises(AssertionError, match="process pool"):
        analyze(NCCL, workers=Workers.local(cpus=2))  # the command line's policy would fork here


def test_the_policy_plans_nothing_for_a_training_process(monkeypatch, tmp_path):
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    paths = sorted(NCCL.rglob("*.json*"))
    assert Workers.inline().plan(paths) == policy.Plan(1, 1) and not Workers.inline().forks
    assert Workers.local(cpus=2, max_memory=1 << 30).plan(paths).per_file == 2
    plain = tmp_path / "w.1.pt.trace.json"
    plain.write_text('{"traceEvents": []}')
    assert not Workers.inline().halves(plain) and Workers.local(cpus=2).halves(plain)
    assert Workers.dask("tcp://127.0.0.1:8786").cluster == "tcp://127.0.0.1:8786"


# A training process's diagnosis of a real 2-rank run starts no child: tests/test_ddp.py
# (test_the_end_of_run_diagnosis_of_a_ddp_run_starts_no_child), on the profiled run that file makes once.


def _logged(log: str, name: str) -> str:
    """Append ``name`` to the file ``log`` (from whichever process runs it) and return it."""
    with open(log, "a") as f:
        f.write(name + "\n")
    if name == "bad":
        raise ValueError(name)
    return name


def test_the_pool_starts_the_largest_traces_first_and_answers_in_order(tmp_path):
    log = str(tmp_path / "log")
    names, sizes = ["a", "b", "c", "d"], [10, 40, 20, 30]
    assert policy.in_pool(1, _logged, [(log, n) for n in names], sizes) == names
    assert Path(log).read_text().split() == ["b", "d", "c", "a"]


def test_the_pool_raises_the_first_failure_in_the_jobs_order(tmp_path):
    log = str(tmp_path / "log")
    with pytest.raises(ValueError, match="bad"):
        policy.in_pool(1, _logged, [(log, "a"), (log, "bad"), (log, "c")], [3, 2, 1])
    assert Path(log).read_text().split()[:2] == ["a", "bad"]


def test_local_processes_send_back_reports_and_this_process_only_joins_them(tmp_path, monkeypatch):
    """Each rank is parsed and reported in a child; this process reports on none of them itself, and the
    report is the one made here alone."""
    from stepscope.analysis.json_out import dumps
    from stepscope.report import engine

    job = DATA / "suite_ddp" / "straggler"
    alone = dumps(analyze(job, workers=Workers.inline()).to_dict())
    log = tmp_path / "pids"
    report = engine.evidence_of_file

    def logged(*args, **kwargs):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return report(*args, **kwargs)

    monkeypatch.setattr(engine, "evidence_of_file", logged)
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)  # even these small traces go to children
    assert dumps(analyze(job, workers=Workers.local(cpus=2)).to_dict()) == alone
    pids = log.read_text().split()
    assert len(pids) == 2 and str(os.getpid()) not in pids


def test_this_process_alone_holds_one_trace_at_a_time(monkeypatch):
    """Working alone, the front door parses, reports and lets go of each rank before the next: the events of
    no two ranks are alive at once (a training process diagnosing a many-rank job)."""
    import gc
    import weakref

    from stepscope.analysis import report as reporting

    alive: weakref.WeakSet = weakref.WeakSet()
    most = []
    parse = reporting.parse_trace_file

    def tracked(*args, **kwargs):
        parsed = parse(*args, **kwargs)
        gc.collect()
        most.append(len(alive))  # parses still alive when this one is made
        alive.add(parsed)
        return parsed

    monkeypatch.setattr(reporting, "parse_trace_file", tracked)
    report = analyze(DATA / "suite_ddp" / "straggler", workers=Workers.inline())
    assert len(report.spans) == 2 and most == [0, 0]


TRIM_CHILD = """
import os, sys
from stepscope.trace import workers
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
blocks = [bytearray(100_000) for _ in range(1000)]  # 100 MB of the heap (each below mmap's threshold)
pin = bytearray(100_000)  # above them: free() alone cannot give them back from the heap's top
del blocks
before = resident()
pool = workers.fork_pool(1)
child = pool.submit(resident).result()
pool.shutdown()
print(before - resident(), before - child)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc")
def test_a_fork_hands_the_heaps_free_pages_back_first():
    """A helper shares its parent's resident pages, free ones too: fork_pool gives the heap's free pages back
    to the system first (glibc's malloc_trim), so neither process holds the 100 MB freed before it."""
    from stepscope.trace import workers
    if workers._libc("malloc_trim") is None:
        pytest.skip("no malloc_trim in this C library")
    out = subprocess.run([sys.executable, "-c", TRIM_CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    parent_drop, child_below = map(int, out.stdout.split())
    assert parent_drop > 80e6 and child_below > 80e6, (parent_drop, child_below)


_FAULTS = """
import resource, sys
from stepscope.trace import workers
kept = workers.keep_heap() if sys.argv[1] == "keep" else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def piece():  # a piece's buffers: two blocks of 12 MiB held together, then freed
    a, b = bytearray(12 << 20), bytearray(12 << 20)
    del a, b
piece()
before = faults()
for _ in range(10):
    piece()
print(kept, faults() - before)
"""


def test_a_process_that_reads_traces_reuses_its_pieces_memory():
    """keep_heap: the blocks of a trace's piece (two of 12 MiB here) that are freed are kept and reused. By
    default glibc hands them back (they fill its heap's top past its trim threshold) and faults them in afresh
    for the next piece, 6,144 pages of 4 KiB each time."""
    def run(mode: str) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True)
        kept, faults = out.stdout.split()
        return kept, int(faults)

    kept, faults = run("keep")
    _, fresh = run("default")
    assert kept == "True"
    assert fresh >= 10 * 6144 * 0.9  # each piece's 24 MiB faulted in again
    assert faults < 1000
