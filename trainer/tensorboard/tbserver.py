"""Start a real TensorBoard (with torch-tb-profiler) on a free loopback port, for tests.

    with TensorBoard(logdir) as tb:
        tb.wait_for_runs(["myrun"])
        overview = tb.profiler("overview", run="myrun", worker=w, span=s)

Nothing is mocked: this is the `tensorboard` the user runs, queried over HTTP on 127.0.0.1 only. Its output
goes to a log in a temporary directory (never beside the logdir, which may be read-only), removed on exit.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

PLUGIN = "/data/plugin/pytorch_profiler"

# A loopback server is never reached through a proxy. urllib.request.urlopen's shared opener reads the
# proxy variables once, at its first call in the process, and keeps them: a process that once ran with
# http_proxy set (a user behind a proxy, a test of an offline download) would otherwise send every later
# request for 127.0.0.1 to that proxy.
LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def loopback_get(url: str, timeout_s: float = 60.0) -> bytes:
    """GET a loopback URL directly, whatever the proxy settings; gunzips a gzip body."""
    with LOOPBACK.open(url, timeout=timeout_s) as r:
        body = r.read()
        if r.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return body


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TensorBoard:
    def __init__(self, logdir: Path, startup_timeout_s: float = 60.0) -> None:
        self.logdir = Path(logdir)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self._log_dir: str | None = None
        self.log_path = Path(os.devnull)

    def __enter__(self) -> TensorBoard:
        self._log_dir = tempfile.mkdtemp(prefix="stepscope-tensorboard-")
        self.log_path = Path(self._log_dir) / f"tensorboard-{self.port}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(self.logdir), "--host", "127.0.0.1",
             "--port", str(self.port), "--load_fast=false", "--reload_interval", "2"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = self.log_text()
                self.__exit__(None, None, None)
                raise RuntimeError(f"tensorboard exited with {self.proc.returncode}: {text}")
            try:
                loopback_get(self.base + "/data/plugins_listing", timeout_s=5.0)
                return self
            except (urllib.error.URLError, OSError) as e:  # not listening yet, or busy starting
                last_error = e
                time.sleep(0.5)
        text = self.log_text()  # read before __exit__ removes the log
        self.__exit__(None, None, None)
        raise TimeoutError(f"tensorboard did not answer within {self.startup_timeout_s}s "
                           f"(last: {last_error!r}): {text}")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        if self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def get_bytes(self, path: str, **params) -> bytes:
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        return loopback_get(url)

    def get(self, path: str, **params):
        return json.loads(self.get_bytes(path, **params))

    def profiler(self, route: str, **params):
        """GET /data/plugin/pytorch_profiler/<route> as JSON."""
        return self.get(f"{PLUGIN}/{route}", **params)

    def wait_for_runs(self, runs: list[str], timeout_s: float = 180.0) -> list[str]:
        """Wait until the plugin lists every run in ``runs`` and has finished loading."""
        deadline = time.monotonic() + timeout_s
        seen: dict = {}
        while time.monotonic() < deadline:
            seen = self.profiler("runs")
            if set(runs) <= set(seen["runs"]) and not seen["loading"]:
                return seen["runs"]
            time.sleep(1.0)
        raise TimeoutError(f"plugin listed {seen} after {timeout_s}s, wanted {runs}; log: {self.log_text()}")

    def first_worker_span(self, run: str, view: str = "Overview") -> tuple[str, str]:
        worker = self.profiler("workers", run=run, view=view)[0]
        span = self.profiler("spans", run=run, worker=worker)[0]
        return worker, span
