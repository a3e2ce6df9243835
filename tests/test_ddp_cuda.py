"""DDP with whole-step CUDA graphs on 2 GPUs (NCCL): the all-reduces are captured and replayed.

    pytest -q -m cuda tests/test_ddp_cuda.py       # on a machine with 2 or more GPUs (skipped otherwise)
"""

from __future__ import annotations

import json

import pytest
import torch
from stepscope.report.front import read_report
from stepscope.trace.discover import discover
from stepscope.trace.files import find_raw_traces, load_trace
from trainrun import REPO, TRAIN, run_json, run_torchrun

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")]


def test_graphed_ddp_trains_like_eager_ddp_and_keeps_ranks_in_sync(tmp_path):
    out = tmp_path / "result.json"
    r = run_torchrun([str(REPO / "tests" / "ddp_graph_worker.py"), str(out)])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    eager, graphed = res["eager"], res["graphed"]
    # each rank trains on its own batches: equal parameters mean the captured all-reduce ran at every replay
    assert graphed["param_spread"] == 0.0 and eager["param_spread"] == 0.0
    # the graph trains like eager DDP: same per-step losses (random labels: no trend to check), same update size
    assert graphed["losses"] == pytest.approx(eager["losses"], rel=5e-3)
    assert eager["param_moved"] > 1e-2 and graphed["param_moved"] == pytest.approx(eager["param_moved"], rel=5e-2)


def test_train_py_cuda_graphs_under_torchrun_with_profile(tmp_path):
    logdir = tmp_path / "logs"
    r = run_torchrun([str(TRAIN), "--cuda-graphs", "--arch", "resnet8", "--batch-size", "64", "--steps", "40",
                  "--log-every", "10", "--profile", "--skip-first", "20", "--wait", "0", "--warmup", "1",
                  "--active", "2", "--logdir", str(logdir), "--run-name", "g"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    meta = run_json(logdir / "g")
    assert meta["status"] == "completed" and meta["world_size"] == 2 and meta["step_kind"] == "cuda-graphs"
    raws = find_raw_traces(logdir / "g")
    assert len(raws) == 2
    for tf in raws:
        names = {e.get("name", "") for e in load_trace(tf.path)["traceEvents"] if e.get("cat") == "kernel"}
        assert any("nccl" in n.lower() for n in names), sorted(names)[:20]  # the all-reduce, replayed in the graph
    # one report.json, the job's (rank 0's at the end of the run): both ranks and their cross-rank section
    own = read_report(logdir / "g", discover(logdir / "g").traces)
    assert own is not None and own["distributed"] and sorted(s["rank"] for s in own["spans"]) == [0, 1]
