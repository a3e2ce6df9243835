"""`--ops custom`: the ResNet trains on stepscope::relu / stepscope::add_relu, forward and backward."""

import pytest
from stepscope.tensorboard.tbserver import TensorBoard
from trainrun import PROFILE_3_STEPS, run_json, run_train

# No skip when the ops cannot be built: the CPU library builds wherever the README's install works, so a
# failure to build is a failure of this test (train.py then refuses --ops custom with one line).
SIX = ["--device", "cpu", "--steps", "6", "--seed", "5", "--batch-size", "32", "--log-every", "2",
       "--synthetic-train-size", "256", "--synthetic-eval-size", "64"]


def test_custom_and_native_ops_reach_the_same_loss_and_custom_ops_show_in_the_plugin(tmp_path):
    r = run_train([*SIX, "--ops", "native", "--logdir", str(tmp_path), "--run-name", "native"])
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_train([*SIX, "--ops", "custom", *PROFILE_3_STEPS, "--logdir", str(tmp_path), "--run-name", "custom"])
    assert r.returncode == 0, r.stderr[-2000:]
    native = run_json(tmp_path / "native")["final"]["train_loss"]
    custom = run_json(tmp_path / "custom")["final"]["train_loss"]
    assert custom == pytest.approx(native, rel=1e-3)
    with TensorBoard(tmp_path) as tb:
        tb.wait_for_runs(["custom"])
        worker, span = tb.first_worker_span("custom")
        table = tb.profiler("operation/table", run="custom", worker=worker, span=span, group_by="Operation")["data"]
        names = {op["name"] for op in table}
        assert {"stepscope::relu", "stepscope::add_relu", "stepscope::relu_backward"} <= names, sorted(names)
        assert "aten::relu" not in names and "aten::relu_" not in names


def test_custom_ops_refused_up_front_when_they_cannot_be_built(tmp_path):
    r = run_train([*SIX, "--ops", "custom", "--logdir", str(tmp_path / "logs")],
                  env={"CXX": "/nonexistent/c++", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")})
    assert r.returncode == 2
    assert r.stderr.strip() == "train.py: error: --ops custom is unavailable on cpu: no C++ compiler (/nonexistent/c++) found"
    assert not (tmp_path / "logs").exists()
