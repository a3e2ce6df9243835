"""DDP under torchrun on the CPU (gloo, 2 processes), the way a user runs it:

- a profiled run: rank 0 logs, every rank writes its trace (with its rank) into one run directory, and the
  plugin's Distributed view answers over HTTP;
- a rank that raises ends the whole group promptly with its own error; a rank killed outright never hangs
  the others;
- Ctrl-C (SIGINT to torchrun's process group, as a terminal sends it) stops every rank, traces flushed;
- flags that cannot work with several processes are refused before anything is written;
- rank 0's end-of-run diagnosis starts no child process (the worker policy of trace/workers.py).

The profiled run is made once (`ddp_run`) and read by every test that needs one.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from stepscope.cli.main import train_main
from stepscope.demo.config import DataConfig, TrainConfig
from stepscope.demo.data import SyntheticData
from stepscope.demo.distributed import check_distributed
from stepscope.demo.env import Env
from stepscope.tensorboard.tbserver import TensorBoard
from stepscope.trace.files import find_plugin_traces, find_raw_traces, load_trace
from trainrun import REPO, TORCHRUN, TRAIN, run_json, run_torchrun

FAILING_WORKER = Path(__file__).resolve().parent / "failing_rank_worker.py"

# 256 samples per rank, batch 32 per rank, LeNet (no test here depends on the model; ResNet-8's steps cost
# seconds more per rank): a few steps take seconds on 2 cores
DDP_FAST = ["--device", "cpu", "--arch", "lenet", "--synthetic-train-size", "512", "--synthetic-eval-size", "64",
            "--batch-size", "32", "--log-every", "2"]
PROFILE_3_STEPS = ["--profile", "--skip-first", "0", "--wait", "0", "--warmup", "1", "--active", "2"]
# Holistic Trace Analysis 0.5.0 (hta/common/trace_file.py) finds a trace's rank with this regex on its text
HTA_RANK = re.compile(r'"rank":\s+(\d+)')


def torchrun(args: list[str], env: dict | None = None, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = run_torchrun([str(TRAIN), *args], env, timeout)
    return r, time.monotonic() - t0


def worker_rank(worker: str) -> int:
    return int(re.fullmatch(r".+_\d+_rank(\d+)", worker).group(1))


# Loaded at the start of every Python process of the run (PYTHONPATH): lowers the size from which the worker
# policy spreads work over processes to nothing, and logs each fork with the functions on the forking thread's
# stack. The training processes never fork whatever the threshold; the log is read by
# test_the_end_of_run_diagnosis_of_a_ddp_run_starts_no_child.
FORK_LOGGER = """
import os, traceback
if os.environ.get("FORK_LOG"):
    import stepscope.trace.workers as _workers
    _workers.SPLIT_FROM = 0
    _fork = os.fork
    def _logged_fork():
        with open(os.environ["FORK_LOG"], "a") as f:
            f.write(" ".join(frame.name for frame in traceback.extract_stack()) + "\\n")
        return _fork()
    os.fork = _logged_fork
"""


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """One profiled 2-rank run, every process of it under FORK_LOGGER: (logdir, run dir, seconds it took,
    torchrun's result, the environment that loads the fork logger)."""
    root = tmp_path_factory.mktemp("ddp")
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(textwrap.dedent(FORK_LOGGER))
    env = {"FORK_LOG": str(root / "forks.log"),
           "PYTHONPATH": os.pathsep.join([str(root / "site"), os.environ.get("PYTHONPATH", "")])}
    logdir = root / "logs"
    r, elapsed = torchrun([*DDP_FAST, "--steps", "6", *PROFILE_3_STEPS, "--logdir", str(logdir), "--run-name", "r"],
                          env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return logdir, logdir / "r", elapsed, r, env


def test_rank0_logs_and_every_rank_writes_its_trace(ddp_run):
    _logdir, run, elapsed, _, _ = ddp_run
    d = run_json(run)
    assert d["status"] == "completed" and d["final"]["steps"] == 6
    assert d["world_size"] == 2 and d["global_batch_size"] == 64 and d["config"]["data"]["batch_size"] == 32
    assert d["distributed"]["backend"] == "gloo"
    assert d["distributed"]["ddp"] == {"broadcast_buffers": False, "gradient_as_bucket_view": True,
                                       "dynamo_optimize_ddp": None}
    assert [worker_rank(w) for w in d["distributed"]["workers"]] == [0, 1]
    assert len(list(run.glob("events.out.tfevents.*"))) == 1  # scalars from rank 0 only

    adapted, raw = find_plugin_traces(run), find_raw_traces(run)
    assert sorted(worker_rank(t.worker) for t in adapted) == [0, 1]
    assert sorted(t.path.name for t in adapted) == sorted(d["traces"])
    # the same span on both ranks, so raw/<span>/ holds one file per rank (what HTA reads)
    assert len({t.span for t in adapted}) == 1 and [t.path.parent.name for t in raw] == [adapted[0].span] * 2
    gloo_ops = []
    for t in [*adapted, *raw]:
        trace = load_trace(t.path)
        info = trace["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (worker_rank(t.worker), 2, "gloo")
        gloo_ops.append(sum(str(e.get("name", "")).startswith("gloo:") for e in trace["traceEvents"]))
    assert gloo_ops[0] > 0 and len(set(gloo_ops)) == 1  # the Distributed view needs equal counts per worker
    assert elapsed < 60, f"the 2-process run took {elapsed:.0f} s"


def test_traces_carry_their_rank_in_the_form_hta_reads(ddp_run):
    """HTA takes the first `"rank": N` (whitespace after the colon) in the file's text; compact JSON has none."""
    _logdir, run, _, _, _ = ddp_run
    for t in [*find_plugin_traces(run), *find_raw_traces(run)]:
        with gzip.open(t.path, "rt") as f:
            found = next((m for m in map(HTA_RANK.search, f) if m), None)
        assert found is not None and int(found.group(1)) == worker_rank(t.worker), t.path


def test_distributed_view_in_the_plugin(ddp_run):
    logdir, run, _, _, _ = ddp_run
    workers = sorted(t.worker for t in find_plugin_traces(run))
    with TensorBoard(logdir) as tb:
        tb.wait_for_runs(["r"])
        assert "Distributed" in tb.profiler("views", run="r")
        assert tb.profiler("workers", run="r", view="Distributed") == ["All"]
        span = tb.profiler("spans", run="r", worker="All")[0]
        q = {"run": "r", "worker": "All", "span": span}
        assert tb.profiler("distributed/gpuinfo", **q) is None  # no GPU in a CPU run
        overlap = tb.profiler("distributed/overlap", **q)["data"]["all"]
        assert sorted(overlap) == workers and all(v[0] + v[1] > 0 for v in overlap.values())  # computation
        wait = tb.profiler("distributed/waittime", **q)["data"]["all"]
        assert sorted(wait) == workers
        ops = tb.profiler("distributed/commops", **q)["data"]
        assert sorted(ops) == workers
        calls = {w: {row[0]: row[1] for row in table["rows"]} for w, table in ops.items()}
        assert calls[workers[0]].get("gloo:all_reduce", 0) > 0 and calls[workers[0]] == calls[workers[1]]


def test_the_end_of_run_diagnosis_of_a_ddp_run_starts_no_child(ddp_run):
    """Rank 0's diagnosis of a 2-rank gloo run whose traces are over the (lowered) threshold: no fork while
    it runs. The same traces analysed by the command, under the same threshold, do fork: the log works."""
    logdir, run, _, r, env = ddp_run
    assert (run / "diagnosis.md").is_file() and "analysing the profiled steps" in r.stdout
    log = Path(env["FORK_LOG"])
    forks = log.read_text().splitlines() if log.exists() else []
    assert not [f for f in forks if "diagnose_run" in f], forks

    p = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", str(run), "--json"],
                       capture_output=True, text=True, env={**os.environ, **env}, cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr
    assert [f for f in log.read_text().splitlines() if "analyze_traces" in f]  # the command forked its ranks


def test_each_rank_trains_on_its_own_shard():
    cfg = DataConfig(synthetic_train_size=64, synthetic_eval_size=8, batch_size=8)
    shards = [SyntheticData(cfg, Env(torch.device("cpu"), None, False, rank, 2, rank), 10, 0)
              for rank in (0, 1)]
    full = SyntheticData(cfg, Env(torch.device("cpu"), None, False), 10, 0)
    rows = [{tuple(x.flatten()[:8].tolist()) for x in s.train_x} for s in shards]
    assert len(rows[0]) == len(rows[1]) == 32 and not rows[0] & rows[1]
    assert rows[0] | rows[1] == {tuple(x.flatten()[:8].tolist()) for x in full.train_x}
    assert shards[0].steps_per_epoch == 4


@pytest.mark.parametrize("cfg,ranks,gpus,message", [
    (TrainConfig(device="cuda"), (3, 4, 3), 2, "local rank 3 but only 2 GPU(s) are visible"),
    (TrainConfig(data=DataConfig(synthetic_train_size=100, batch_size=64)), (1, 2, 1), 0,
     "--synthetic-train-size 100 split over 2 ranks leaves 50 samples per rank, fewer than --batch-size 64"),
])
def test_flags_that_cannot_work_with_several_processes(cfg, ranks, gpus, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_distributed(cfg, ranks, gpus)
    check_distributed(cfg, (0, 1, 0), gpus)  # a single process is not affected


def test_cuda_graphs_are_accepted_under_torchrun():
    check_distributed(TrainConfig(cuda_graphs=True, device="cuda"), (1, 2, 1), 2)  # DDP's all-reduces are captured


def test_bad_flag_on_a_rank_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """What each rank of `torchrun --nproc_per_node 2 train.py` does with a flag that cannot work with two
    ranks, in this process (torchrun's environment): one line, exit code 2, no run directory. Each rank's own
    process and its line under torchrun: test_bad_flag_under_torchrun_writes_nothing (slow); the one-line
    exit 2 of train.py as a real process: tests/test_full_disk.py."""
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR"))  # train_main sets it
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    logdir = tmp_path / "logs"
    assert train_main([*DDP_FAST, "--synthetic-train-size", "48", "--logdir", str(logdir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("train.py: error: "), err
    assert "split over 2 ranks leaves 24 samples per rank" in err, err
    assert not logdir.exists()


@pytest.mark.slow  # in-process by test_bad_flag_on_a_rank_is_refused_before_anything_is_written
def test_bad_flag_under_torchrun_writes_nothing(tmp_path):
    logdir = tmp_path / "logs"
    r, _ = torchrun([*DDP_FAST, "--synthetic-train-size", "48", "--logdir", str(logdir)])
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("train.py: error:")]
    assert len(lines) == 2 and "split over 2 ranks leaves 24 samples per rank" in lines[0], r.stderr[-3000:]
    assert not logdir.exists()


def test_a_failing_rank_ends_the_group_with_its_error(tmp_path):
    t0 = time.monotonic()
    # --steps bounds the run even if the failure were never injected
    r = run_torchrun([str(FAILING_WORKER), "3", "1", *DDP_FAST, "--steps", "400", "--logdir", str(tmp_path)],
                     timeout=120)
    elapsed = time.monotonic() - t0
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "RuntimeError: injected failure at step 3 on rank 1" in out, out[-3000:]
    root_cause = out[out.index("Root Cause"):]
    assert re.search(r"rank\s*: 1 ", root_cause) and "injected failure at step 3 on rank 1" in root_cause
    assert elapsed < 60, f"the group took {elapsed:.0f} s to end"


@contextlib.contextmanager
def started_torchrun(args: list[str]):
    """torchrun in a session of its own, like a terminal's foreground job (its workers start their own)."""
    p = subprocess.Popen([*TORCHRUN, str(TRAIN), *args], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    workers = []
    try:
        yield p
    finally:
        if p.poll() is None:  # the test failed half-way: end torchrun and the workers it started
            with contextlib.suppress(Exception):
                workers = [_child_with_rank(p.pid, rank) for rank in (0, 1)]
            p.kill()
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        p.communicate()


def _wait_for(folder: Path, pattern: str, p: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not list(folder.glob(pattern)):
        assert p.poll() is None and time.monotonic() < deadline, f"no {pattern} in {folder}"
        time.sleep(0.5)


def _child_with_rank(parent: int, rank: int) -> int:
    for task in Path(f"/proc/{parent}/task").iterdir():
        for pid in (task / "children").read_text().split():
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"RANK={rank}".encode() in environ:
                return int(pid)
    raise AssertionError(f"no child of {parent} has RANK={rank}")


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_with_traces_flushed(tmp_path):
    run = tmp_path / "int"
    # repeated 4-step cycles: traces are written all along, and the one in progress is flushed at Ctrl-C
    with started_torchrun([*DDP_FAST, "--steps", "100000", "--profile", "--skip-first", "0", "--wait", "0",
                           "--warmup", "1", "--active", "3", "--repeat", "0", "--no-with-stack",
                           "--no-profile-memory", "--logdir", str(tmp_path), "--run-name", "int"]) as p:
        _wait_for(run / "raw", "*/*rank1.trace.json.gz", p)
        time.sleep(3)
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, _ = p.communicate(timeout=120)
        stop_s = time.monotonic() - t0
    for rank in (0, 1):
        assert re.search(rf"rank {rank}: interrupted at step \d+ \(SIGINT\); flushing", out), out[-4000:]
    assert stop_s < 20, f"stopping took {stop_s:.0f} s (torchrun kills what is left after 30 s)"
    d = run_json(run)
    assert d["status"] == "interrupted" and d["final"]["steps"] > 0
    raw = find_raw_traces(run)
    assert all(any(span_dir.iterdir()) for span_dir in (run / "raw").iterdir())  # no cycle lost half-way
    assert not list(run.rglob(".tmp-*"))
    for rank in (0, 1):  # every 4-step cycle, including the one in progress at the stop, was written
        stopped = int(re.search(rf"rank {rank}: interrupted at step (\d+) ", out).group(1))
        cycles = [t for t in raw if worker_rank(t.worker) == rank]
        assert len(cycles) == -(-stopped // 4), (stopped, len(cycles))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_killed_rank_does_not_hang_the_others(tmp_path):
    with started_torchrun([*DDP_FAST, "--steps", "100000", "--logdir", str(tmp_path), "--run-name", "k"]) as p:
        _wait_for(tmp_path / "k", "events.out.tfevents.*", p)
        time.sleep(2)
        t0 = time.monotonic()
        os.kill(_child_with_rank(p.pid, 1), signal.SIGKILL)  # like the kernel's OOM killer
        out, _ = p.communicate(timeout=120)
        assert time.monotonic() - t0 < 30
    assert p.returncode != 0
    root_cause = out[out.index("Root Cause"):]
    assert re.search(r"rank\s*: 1 ", root_cause) and "SIGKILL" in root_cause, root_cause[:2000]
