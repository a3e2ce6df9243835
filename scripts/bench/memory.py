"""Time and memory of a command and the processes it starts, for analysis_speed.py and rank_scaling.py.

    wall, cpu, largest_mib, vmhwm_sum_mib, held_mib = measure_command([sys.executable, "scripts/analyze.py", "run", "--json"])
    wall, cpu, peak_rss_mib = timed(cmd)     # as /usr/bin/time measures it, nothing sampled meanwhile

Peak RSS is read from /proc (each process's VmHWM, and the sum of the tree's proportional set sizes),
sampled while the command runs; see ``measure_command``. Linux only.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants alive now."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
        out.append(p)
    return out


def _field_kib(path: str, key: str) -> int:
    try:
        with open(path) as f:
            return next((int(line.split()[1]) for line in f if line.startswith(key)), 0)
    except (OSError, ValueError):
        return 0


def tree_peaks(pid: int, peaks: dict[int, int]) -> None:
    """Record in ``peaks`` the VmHWM (peak RSS, KiB) of ``pid`` and of all its descendants alive now."""
    for p in _tree(pid):
        peaks[p] = max(peaks.get(p, 0), _field_kib(f"/proc/{p}/status", "VmHWM:"))


def _tree_pss(pid: int) -> int:
    """KiB of memory the tree of ``pid`` holds now, each page shared between processes counted once
    (the sum of their proportional set sizes)."""
    return sum(_field_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in _tree(pid))


def _started(cmd: list[str], err, env: dict | None = None) -> subprocess.Popen:
    """``cmd`` started with its stderr into the file ``err``: not a pipe, which a command that says more than
    a pipe holds would fill and then block on, while nothing reads it until the command ends."""
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)


def _ended(p: subprocess.Popen, status: int, err) -> None:
    """The command's exit status into ``p``; exits with its last words where it failed."""
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        err.seek(0)
        said = err.read().decode(errors="replace").strip()[-300:]
        raise SystemExit(f"error: {' '.join(map(str, p.args))} exited {p.returncode}: {said}")


def measure_command(cmd: list[str]) -> tuple[float, float, float, float, float]:
    """(wall s, CPU s of the process and its children, peak RSS MiB of the largest process, sum of the peak
    RSS of every process of the tree MiB, peak memory of the tree MiB) of one subprocess. Peaks are each
    process's VmHWM, sampled every 20 ms while it lives; not ru_maxrss, which Linux carries over from the
    forking parent across exec (a big pytest process would show up as the child's peak). The sum is an upper
    bound: a forked helper's RSS includes every page it shares with its parent. The tree's peak memory is
    the largest sum of the processes' proportional set sizes (shared pages counted once), sampled every
    100 ms: the physical memory the command held at once."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = _started(cmd, err)
        peaks: dict[int, int] = {}
        held, tick = 0, 0
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            tree_peaks(p.pid, peaks)
            if tick % 5 == 0:
                held = max(held, _tree_pss(p.pid))
            tick += 1
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        _ended(p, status, err)
    return (wall, usage.ru_utime + usage.ru_stime, max(peaks.values(), default=0) / 1024,
            sum(peaks.values()) / 1024, max(held, max(peaks.values(), default=0)) / 1024)


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of one subprocess and the processes it waited for, as ``/usr/bin/time``
    gives them: nothing is sampled while it runs (``measure_command`` samples /proc). The peak is ru_maxrss,
    which starts from the caller's own RSS (Linux carries it across exec): call it from a small process. Exits
    with the command's last words where it fails."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = _started(cmd, err, env)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        _ended(p, status, err)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
