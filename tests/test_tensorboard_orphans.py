"""Children die with their parent: a SIGKILLed `stepscope tensorboard` leaves no TensorBoard serving its port,
and the next server removes the shadow folder it left behind.

    pytest tests/test_tensorboard_orphans.py -q
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stepscope.tensorboard.tbserver import free_port

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def start(src: Path, tmp: Path, port: int, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, str(REPO / "tests" / "stepscope_here.py"), "tensorboard", "--logdir",
                                 str(src), "--port", str(port), "--poll", "0.2"], stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(tmp)},
                                start_new_session=True)


def wait_for(pattern: str, log: Path, proc: subprocess.Popen, timeout_s: float = 120) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text())
        if m:
            return m
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    raise TimeoutError(log.read_text())


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"  # a zombie serves nothing


def test_sigkill_of_the_server_frees_its_port_and_the_next_start_removes_its_shadow(tmp_path):
    src, tmp = tmp_path / "traces", tmp_path / "tmp"
    src.mkdir()
    tmp.mkdir()
    port = free_port()
    first = start(src, tmp, port, tmp_path / "first.log")
    try:
        tb_pid = int(wait_for(r"TensorBoard \(pid (\d+)\)", tmp_path / "first.log", first).group(1))
        deadline = time.monotonic() + 120
        while not listening(port):
            assert time.monotonic() < deadline, (tmp_path / "first.log").read_text()
            time.sleep(0.5)
        (shadow,) = tmp.glob("stepscope-tb-*")
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        t0 = time.monotonic()
        while listening(port) or not gone(tb_pid):
            assert time.monotonic() - t0 < 10, "TensorBoard outlived its killed parent"
            time.sleep(0.2)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        try:
            os.killpg(first.pid, signal.SIGKILL)  # whatever the session still holds, if the test failed
        except ProcessLookupError:
            pass
    assert shadow.is_dir()  # SIGKILL left no chance to clean up
    second = start(src, tmp, free_port(), tmp_path / "second.log")
    try:
        wait_for(r"TensorBoard \(pid \d+\)", tmp_path / "second.log", second)
        assert not shadow.exists()
        assert f"removed {shadow}" in (tmp_path / "second.log").read_text()
        assert len(list(tmp.glob("stepscope-tb-*"))) == 1  # the second server's own
    finally:
        os.kill(second.pid, signal.SIGINT)
        assert second.wait(timeout=60) == 130
    assert not list(tmp.glob("stepscope-tb-*"))


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (children, theirs ...), by pid: its command line."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            try:
                found[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            todo.append(child)
    return found


def write_long_trace(path: Path, copies: int) -> None:
    """The real trace of tests/data/eager_bs32 (2 steps), its steps repeated ``copies`` times one after the
    other: a trace that keeps torch-tb-profiler's loader busy for a while (about 3.7 MB a copy)."""
    trace = json.loads(gzip.decompress(next((REPO / "tests" / "data" / "eager_bs32").glob("*.gz")).read_bytes()))
    events = trace["traceEvents"]
    times = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    shift = max(times) - min(times) + 1000.0
    out = []
    for k in range(copies):
        for e in events:
            if k and e.get("ph") == "M":
                continue  # process and thread names once
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += k * shift
            name = str(e.get("name", ""))
            if name.startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(name[13:]) + 2 * k}"
            out.append(e)
    trace["traceEvents"] = out
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(json.dumps(trace).encode(), 1))


def test_sigkill_of_the_server_leaves_no_process_it_started(tmp_path):
    """TensorBoard's own children (torch-tb-profiler's loader, multiprocessing's resource tracker) die too:
    they are in TensorBoard's process group, which ends whole when TensorBoard gets its parent-death signal.
    A loader that has finished its file ends by itself once TensorBoard is gone; one still at work on a large
    trace does not. The test holds the loader at work deterministically: it stops the loader (SIGSTOP) as soon
    as it appears, which keeps it from ever ending by itself, while SIGKILL still ends it."""
    src = tmp_path / "traces"
    write_long_trace(src / "long" / "w.1.pt.trace.json.gz", 4)
    (tmp_path / "tmp").mkdir()
    log = tmp_path / "server.log"
    server = start(src, tmp_path / "tmp", free_port(), log)
    started: dict[int, str] = {}
    try:
        tb_pid = int(wait_for(r"TensorBoard \(pid (\d+)\)", log, server).group(1))
        deadline = time.monotonic() + 120
        while not (loaders := [pid for pid, cmd in descendants(tb_pid).items() if "spawn_main" in cmd]):
            assert time.monotonic() < deadline, (descendants(server.pid), log.read_text())
            time.sleep(0.1)
        for pid in loaders:
            os.kill(pid, signal.SIGSTOP)
        started = descendants(server.pid)
        assert tb_pid in started and len(started) >= 2, started  # TensorBoard and processes of its own
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
        time.sleep(10)
        alive = {pid: cmd for pid, cmd in started.items() if not gone(pid)}
        assert not alive, alive
    finally:
        for pid in started:  # what outlived the server, if the test failed
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(server.pid, signal.SIGKILL)  # whatever the session still holds, if the test failed
        except ProcessLookupError:
            pass
