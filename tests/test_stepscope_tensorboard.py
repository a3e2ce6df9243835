"""`stepscope tensorboard` end to end: a real process serving the real TensorBoard and plugin on loopback.

    pytest tests/test_stepscope_tensorboard.py -q      # about a minute on 2 idle cores

DIR holds what other tools wrote: a user's own loop profiled with plain tensorboard_trace_handler and with
export_chrome_trace (tests/foreign_loop.py, run here), every committed Lightning trace (tests/data/lightning*/)
and a JSON file that is no trace. The tests query the plugin's HTTP API and TensorBoard's Text and Scalars,
add a trace while the command runs (written in two halves, seconds apart), and finally Ctrl-C it. The tests
run in file order; the last one stops the server.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from stepscope.tensorboard.tbserver import free_port, loopback_get

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
LIGHTNING = sorted(p for p in DATA.glob("lightning*") if p.is_dir())
PLUGIN = "/data/plugin/pytorch_profiler"
DATALOADER_SPAN = "enumerate(DataLoader)#"


class Server:
    """The running `stepscope tensorboard` process and GETs against the TensorBoard it started."""

    def __init__(self, proc: subprocess.Popen, port: int, out: Path, src: Path) -> None:
        self.proc, self.port, self.out, self.src = proc, port, out, src
        self.base = f"http://127.0.0.1:{port}"

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def get(self, path: str, **params):
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        return json.loads(loopback_get(url))

    def runs(self) -> dict:
        try:
            return self.get(f"{PLUGIN}/runs")
        except (urllib.error.URLError, ConnectionError):
            return {"runs": [], "loading": True}

    def wait_for_runs(self, runs: list[str], timeout_s: float) -> float:
        """Seconds until the plugin lists all of `runs`, loaded."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            seen = self.runs()
            if set(runs) <= set(seen["runs"]) and not seen["loading"]:
                return time.monotonic() - t0
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.output()[-3000:]}"
            time.sleep(0.5)
        raise TimeoutError(f"after {timeout_s}s the plugin lists {self.runs()}, wanted {runs}: {self.output()[-3000:]}")

    def worker(self, run: str, view: str, like: str) -> str:
        return next(w for w in self.get(f"{PLUGIN}/workers", run=run, view=view) if like in w)

    def overview(self, run: str, like: str = "") -> dict[str, int]:
        worker = self.worker(run, "Overview", like)
        span = self.get(f"{PLUGIN}/spans", run=run, worker=worker)[0]
        perf = self.get(f"{PLUGIN}/overview", run=run, worker=worker, span=span)["performance"][0]
        return {"Step": perf["value"], **{c["name"]: c["value"] for c in perf["children"]}}

    def op_rows(self, run: str, like: str = "") -> list[dict]:
        worker = self.worker(run, "Operator", like)
        span = self.get(f"{PLUGIN}/spans", run=run, worker=worker)[0]
        return self.get(f"{PLUGIN}/operation/table", run=run, worker=worker, span=span,
                        group_by="Operation")["data"]

    def diagnosis_text(self, run: str) -> str:
        return self.get("/data/plugin/text/text", run=run, tag="diagnosis")[-1]["text"]

    def has_diagnosis(self, run: str) -> bool:
        tags = self.get("/data/plugin/text/tags")
        return "diagnosis" in tags.get(run, [])


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    src = tmp_path_factory.mktemp("user") / "traces"
    subprocess.run([sys.executable, str(REPO / "tests" / "foreign_loop.py"), str(src)], check=True,
                   capture_output=True, timeout=300)
    for folder in LIGHTNING:
        shutil.copytree(folder, src / folder.name)
    (src / "notes.json").write_text(json.dumps({"lr": 0.1, "note": "not a trace"}))
    before = snapshot(src)
    port = free_port()
    out = src.parent / "stepscope-tensorboard.log"
    with open(out, "w") as log:
        proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "stepscope_here.py"), "tensorboard",
                                 "--logdir", str(src), "--port", str(port), "--poll", "1"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=src.parent, start_new_session=True)
    s = Server(proc, port, out, src)
    s.before = s.late = before  # DIR as prepared, and as it is once the test has added its late trace
    try:
        s.wait_for_runs(["plain", "chrome", *(p.name for p in LIGHTNING)], timeout_s=240)
        yield s
    finally:
        if proc.poll() is None:  # the test failed half-way: end the command and the TensorBoard it started
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_every_run_is_listed_once_and_the_non_trace_is_skipped(server):
    runs = server.runs()["runs"]
    assert sorted(runs) == sorted(["plain", "chrome", *(p.name for p in LIGHTNING)])
    text = server.output()
    # the loop computes on the CPU and waits 16 ms per batch for data: either may dominate on a busy machine
    assert re.search(r"^\+ run plain: 1 trace \(tensorboard_trace_handler\): (cpu|data)_bound$", text, re.M)
    assert re.search(r"^\+ run chrome: 1 trace \(export_chrome_trace\): (cpu|data)_bound$", text, re.M)
    assert "notes.json" not in text  # not a trace, and nothing to say about it


def test_plain_loop_shows_dataloader_time_and_its_diagnosis(server):
    over = server.overview("plain")
    assert over["DataLoader"] > 0, over  # 0 without the adaptation: the plugin ignores user_annotation spans
    assert over["Step"] > 0
    assert any(r["name"] == "aten::conv2d" for r in server.op_rows("plain"))
    text = server.diagnosis_text("plain")
    assert re.search(r"stepscope diagnosis: <code>(cpu|data)_bound</code>", text), text[:300]
    tags = server.get("/data/plugin/scalars/tags")["plain"]
    assert any(tag.startswith("diagnosis/") for tag in tags), tags


def test_export_chrome_trace_file_is_a_run(server):
    over = server.overview("chrome")
    assert over["DataLoader"] > 0, over
    assert any(r["name"] == "aten::linear" for r in server.op_rows("chrome"))
    assert "stepscope diagnosis" in server.diagnosis_text("chrome")


def test_there_is_a_lightning_trace_to_test():
    assert LIGHTNING, "tests/data/lightning*/ holds the Lightning PyTorchProfiler traces these tests need"


@pytest.mark.parametrize("folder", LIGHTNING, ids=[p.name for p in LIGHTNING])
def test_lightning_trace(server, folder):
    trace_path = next(p for p in sorted(folder.glob("*.pt.trace.json*")) if "training_step" in p.name)
    assert re.match(r"(fit|validate|test|predict)-.*\[\w+\].*\.pt\.trace\.json", trace_path.name)
    opener = gzip.open if trace_path.name.endswith(".gz") else open
    with opener(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    cats = {e.get("cat") for e in events}
    assert re.search(rf"^\+ run {re.escape(folder.name)}: \d+ traces? \(Lightning\): ", server.output(), re.M)
    over = server.overview(folder.name, like="training_step")
    rows = server.op_rows(folder.name, like="training_step")
    assert rows and over["Step"] > 0
    if "kernel" in cats:  # a GPU trace: operators own their kernels' time, launches count as Runtime
        assert sum(r["device_self_duration"] for r in rows) > 0
        assert over["Runtime"] > 0, over
    if any(e.get("name", "").startswith(DATALOADER_SPAN) for e in events):
        assert over["DataLoader"] > 0, over
    assert "stepscope diagnosis" in server.diagnosis_text(folder.name)


def test_a_trace_written_while_it_runs_appears_within_30s(server):
    data = next((DATA / "slow_dataset").glob("*.pt.trace.json.gz")).read_bytes()
    late = server.src / "plain" / "late.1795300000000000000.pt.trace.json.gz"
    with open(late, "wb") as f:  # half a file, left alone for several polls: must not be taken
        f.write(data[: len(data) // 2])
        f.flush()
        time.sleep(5)
        assert "plain@2" not in server.runs()["runs"]
        f.write(data[len(data) // 2:])
    server.late = snapshot(server.src)
    took = server.wait_for_runs(["plain@2"], timeout_s=60)
    assert took <= 30, f"the new trace took {took:.1f}s to appear"
    over = server.overview("plain@2")
    assert over["DataLoader"] > 0.75 * over["Step"]  # the whole trace: a data-bound H200 run
    # the profiler tab lists the run as soon as its trace is there; the Text tab shows the diagnosis at
    # TensorBoard's next reload of the event files: both within the same 30 s
    deadline = time.monotonic() + max(1.0, 30 - took)
    while not server.has_diagnosis("plain@2") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "data_bound" in server.diagnosis_text("plain@2")
    assert sorted(server.runs()["runs"]) == sorted(["plain", "plain@2", "chrome", *(p.name for p in LIGHTNING)])


def test_ctrl_c_stops_tensorboard_and_dir_was_never_written(server):
    pid = int(re.search(r"TensorBoard \(pid (\d+)\)", server.output()).group(1))
    os.kill(server.proc.pid, signal.SIGINT)
    assert server.proc.wait(timeout=60) == 130, server.output()[-3000:]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", server.port))
    after = snapshot(server.src)
    assert after == server.late  # nothing written into DIR while it ran
    ours = [k for k in after if k.startswith("plain/late.")] + ["plain"]  # the late file, and its folder's mtime
    assert {k: v for k, v in after.items() if k not in ours} == {k: v for k, v in server.before.items()
                                                               if k not in ours}
