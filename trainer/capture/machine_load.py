"""Whether a run shared its CPUs: how much of all CPUs' time processes outside the run used, and how long the
run's threads, ready to run, waited for a CPU; from /proc (Linux; None elsewhere).

    start = sample()
    ...                                   # the timed steps
    share = contention(start, sample())   # Contention(others_pct, waited_pct), or None where /proc cannot be read

Two runs of one configuration differ by as much as the rest of the machine takes from them: on a 2-core machine
another process on one core slows a step whose two threads meet at every parallel region by up to 2x.
`stepscope diff` reads these figures from each run's run.json and widens its interval by as much as the waiting
could have slowed a run that other processes held CPUs from (report/diff.py). Both figures are needed: a big
machine whose other jobs use a third of its CPUs may leave the run's threads all the CPUs they want (no wait),
and a run whose own threads outnumber the cores waits on an otherwise idle machine (no others), the same in
every run of its configuration.

The run is this process and its descendants (DataLoader workers); under torchrun, the agent that started the
ranks and all its descendants (every rank of the node). ``others_pct``: all CPUs' busy ticks (user, nice,
system, irq, softirq, steal; /proc/stat) minus the run's own (its live processes' utime and stime, and the
children they reaped; /proc/<pid>/stat), over all CPUs' ticks. ``waited_pct``: of the run's busy threads (each
with at least BUSY_THREAD_SHARE of the run's time on a CPU between the samples), the largest share of its
runnable time that one spent waiting on a run queue (/proc/<pid>/task/<tid>/schedstat; threads that ended
between the samples are left out). The largest, not the total: threads that meet at every parallel region go
at the pace of the one kept waiting, while the others spin on their CPUs. That thread's wall time is its time on
a CPU over (1 - waited_pct/100), so no step of the run was slowed by more than that factor by waiting for CPUs
(work slowed on a CPU shared with others, through its caches, is not seen). Torch-free.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

PROC = Path("/proc")
BUSY_THREAD_SHARE = 0.1  # a thread with this share of the run's time on a CPU is one its steps may wait for


class Sample(NamedTuple):
    busy: int  # all CPUs' busy ticks since boot
    total: int  # all CPUs' ticks since boot
    run: int  # the run's processes' ticks
    threads: dict  # the run's live threads: tid -> (ns on a CPU, ns waiting on a run queue)


class Contention(NamedTuple):
    others_pct: float  # the share of all CPUs' time that processes outside the run used
    waited_pct: float | None  # the most any busy thread of the run waited for a CPU, in % of its runnable time


def _cpu_ticks() -> tuple[int, int]:
    fields = (PROC / "stat").read_text().split("\n", 1)[0].split()
    if fields[0] != "cpu":
        raise ValueError("no cpu line")
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def _stat(pid: str) -> tuple[int, int, int, int, int]:
    """(ppid, utime, stime, cutime, cstime) of a process."""
    text = (PROC / pid / "stat").read_text()
    rest = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid ...
    return int(rest[1]), int(rest[11]), int(rest[12]), int(rest[13]), int(rest[14])


def _root() -> int:
    """The run's root process: the torchrun agent for a rank it started, else this process."""
    return os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else os.getpid()


def _threads(pids: list[int]) -> dict:
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(PROC / str(pid) / "task")
        except OSError:
            continue
        for tid in tids:
            try:
                on_cpu, waiting = (PROC / str(pid) / "task" / tid / "schedstat").read_text().split()[:2]
                out[int(tid)] = (int(on_cpu), int(waiting))
            except (OSError, ValueError):
                continue
    return out


def _run(root: int) -> tuple[int, dict]:
    stats: dict[int, tuple[int, int, int, int, int]] = {}
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = _stat(entry.name)
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile, or not readable
    children: dict[int, list[int]] = {}
    for pid, st in stats.items():
        children.setdefault(st[0], []).append(pid)
    ticks, todo, tree = 0, [root], []
    while todo:
        pid = todo.pop()
        if pid in stats:
            tree.append(pid)
            _, utime, stime, cutime, cstime = stats[pid]
            ticks += utime + stime + cutime + cstime
        todo += children.get(pid, [])
    return ticks, _threads(tree)


def sample() -> Sample | None:
    """The machine's and the run's CPU time now; None where /proc cannot be read (not Linux)."""
    try:
        busy, total = _cpu_ticks()
        return Sample(busy, total, *_run(_root()))
    except (OSError, ValueError, IndexError):
        return None


def contention(start: Sample | None, end: Sample | None) -> Contention | None:
    """What the run shared its CPUs with between two samples; None when either is missing or no time passed."""
    if start is None or end is None or end.total <= start.total:
        return None
    others = (end.busy - start.busy) - (end.run - start.run)
    spent = []  # (ns on a CPU, ns waiting) of each thread between the samples; one born meanwhile from its start
    for tid, (c, w) in end.threads.items():
        c0, w0 = start.threads.get(tid, (0, 0))
        spent.append((c - c0, w - w0))
    on_cpu = sum(c for c, _ in spent)
    busy = [(c, w) for c, w in spent if c > 0 and c >= BUSY_THREAD_SHARE * on_cpu]
    return Contention(round(min(max(others / (end.total - start.total) * 100.0, 0.0), 100.0), 1),
                      round(max(w / (c + w) for c, w in busy) * 100.0, 1) if busy else None)
