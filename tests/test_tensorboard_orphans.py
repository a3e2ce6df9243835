"""Children die with their parent: a SIGKILLed `stepscope tensorboard` leaves no TensorBoard serving its port,
and the next server removes the shadow folder it left behind.

    pytest tests/test_tensorboard_orphans.py -q
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stepscope.profiler.serve.tbserver import free_port

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
