"""The device harness of the memory diagnosis (scripts/bench/memory_truth.py) on the CPU: the bisection of the
out-of-memory boundary against a known boundary, the bisect part's rows and JSON with the device's tries
replaced by a known boundary and a clock, the generated programs compile, and the command refuses a machine
without CUDA in one line. What needs a GPU runs on one: scripts/gpu_verify.sh memory_bisect memory_predict memory_ddp.

    python -m pytest -q -p no:xdist tests/test_memory_truth.py
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from bench import memory_truth as mt

REPO = Path(__file__).resolve().parents[1]


def _boundary(limit: int, log: list | None = None):
    """fits(b) of a device whose largest batch is ``limit``."""
    def fits(b: int) -> bool:
        if log is not None:
            log.append(b)
        return b <= limit
    return fits


@pytest.mark.parametrize("limit, predicted", [(1000, 1000.0), (1000, 900.0), (1000, 1120.0), (1000, 400.0),
                                              (1000, 3000.0), (37, 36.0), (3, 10.0), (1, 5.0)])
def test_the_bisection_finds_a_known_boundary_to_within_2_percent(limit, predicted):
    log: list[int] = []
    r = mt.bisect_boundary(_boundary(limit, log), predicted)
    assert r["converged"] and r["monotonic"] and r["stopped"] is None
    assert r["fits"] <= limit < r["oom"]
    assert r["oom"] - r["fits"] <= 1 or r["oom"] <= r["fits"] * 1.02
    assert r["tries"] == log and len(set(log)) == len(log)  # no batch tried twice


def test_a_prediction_within_15_percent_takes_the_fewest_tries():
    """The first two tries bracket the prediction -15%/+15%; halving 30% down to 2% takes four more."""
    log: list[int] = []
    r = mt.bisect_boundary(_boundary(1000, log), 1000.0)
    assert log[:2] == [850, 1150] and len(log) <= 6 and r["converged"]


def test_no_answer_stops_the_search_with_the_bracket_reached():
    calls = []

    def fits(b):
        calls.append(b)
        return None if len(calls) > 2 else b <= 1000
    r = mt.bisect_boundary(fits, 1000.0)
    assert not r["converged"] and r["stopped"] == f"no answer at batch {calls[-1]}"
    assert (r["fits"], r["oom"]) == (850, 1150) and r["tries"] == [850, 1150]


def test_tries_that_contradict_each_other_are_flagged():
    """A batch that fits above one that did not (the allocator's luck near the limit): not monotonic."""
    r = mt.bisect_boundary(_boundary(1000), 1000.0, known={500: False, 900: True})
    assert r["oom"] == 500 and r["fits"] < 500 and not r["monotonic"]
    assert mt.bisect_boundary(_boundary(1000), 1000.0, known={500: True})["monotonic"]


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_the_bisect_part_writes_each_family_row_as_it_goes(tmp_path):
    """The part with the device replaced: a known boundary per family, each try taking 10 s of a fake clock;
    the JSON is written after every try, each row holds the prediction, the boundary, the error and the sizes,
    and a family whose share of the budget is spent says so."""
    limits = {"resnet50": 700, "gpt": 90, "mlp_adamw": 2000}
    clock = _Clock()
    doc = {"parts": {"bisect": []}}
    out = tmp_path / "memory_truth.json"
    writes = []

    def save():
        out.write_text(json.dumps(doc))
        writes.append(len(doc["parts"]["bisect"]))

    def predict(name, folder, b0, timeout):
        clock.t += 20
        return {"batch_scale_predicted": 10.0 if name == "resnet50" else 4.5, "capacity_gib": 79.2}

    def try_batch(name, b, timeout):
        assert timeout >= mt.BISECT_MIN_TRY_S
        clock.t += 10
        ok = b <= limits[name]
        return {"batch": b, "result": "ok" if ok else "oom", "peak_allocated": b * 100 if ok else None,
                "peak_reserved": b * 120 if ok else None, "persistent": 1000 if ok else None}

    def sizes(name, b0, timeout):
        out = []
        for m in mt.SIZES:
            out.append({**try_batch(name, m * b0, timeout), "multiple": m})
            if out[-1]["result"] != "ok":
                break
        return out

    mt.bisect(tmp_path, ["resnet50", "gpt"], doc["parts"]["bisect"], save, budget_s=260,
              try_batch=try_batch, predict=predict, sizes=sizes, clock=clock)
    rows = json.loads(out.read_text())["parts"]["bisect"]
    assert [r["family"] for r in rows] == ["resnet50", "gpt"]
    r50 = rows[0]
    assert r50["predicted_batch"] == 640.0 and r50["converged"]
    assert r50["boundary_fits"] <= 700 < r50["boundary_oom"] <= r50["boundary_fits"] * 1.02 + 1
    assert r50["error_pct"] == pytest.approx(100 * (640 - r50["boundary_fits"]) / r50["boundary_fits"], abs=0.01)
    assert r50["sizes"][0] == {"batch": 64, "result": "ok", "peak_allocated": 6400, "peak_reserved": 7680,
                               "persistent": 1000, "multiple": 1}
    assert [s["batch"] for s in r50["sizes"]] == [64, 128, 256] and all(s["result"] == "ok" for s in r50["sizes"])
    gpt = rows[1]  # base batch 16, predicted 72: 4x (64) fits, above -15% (61), so the bisection starts at +15%
    assert gpt["boundary_fits"] <= 90 < gpt["boundary_oom"] and gpt["converged"]
    assert [t["batch"] for t in gpt["tries"]][:1] == [83] and 61 not in [t["batch"] for t in gpt["tries"]]
    assert writes == sorted(writes) and len(writes) > len(r50["tries"]) + len(gpt["tries"])
    late: list = []  # a budget spent before a family starts: its row says so, nothing is tried
    mt.bisect(tmp_path, ["mlp_adamw"], late, save, budget_s=10, try_batch=try_batch, predict=predict, sizes=sizes,
              clock=clock)
    assert late == [{"family": "mlp_adamw", "base_batch": 256, "budget_s": 10.0, "error": "no time left"}]


def test_predict_holds_the_prediction_to_the_boundary_bisected_before_on_that_gpu_model(tmp_path, capsys):
    """The predict part: the families with a boundary for this GPU model get the prediction and its error
    against the largest batch that fit there; the others are said and skipped, with nothing recorded."""
    rows: list = []
    saved = []

    def predict(name, folder, b0, timeout):
        return {"batch_scale_predicted": 15.0, "capacity_gib": 79.2}

    mt.predict(tmp_path, ["gpt", "resnet50"], rows, lambda: saved.append(len(rows)), predict=predict,
               device="NVIDIA H200")
    fits, oom = mt.BOUNDARIES["NVIDIA H200"]["gpt"]
    assert [r["family"] for r in rows] == ["gpt"] and saved == [1]
    assert rows[0]["predicted_batch"] == 16 * 15.0 and (rows[0]["boundary_fits"], rows[0]["boundary_oom"]) == (fits, oom)
    assert rows[0]["error_pct"] == pytest.approx(100 * (240 - fits) / fits, abs=0.01)
    out = capsys.readouterr().out
    assert f"predict gpt: predicted 240.0 against {fits} fits / {oom} does not" in out
    assert "predict resnet50: no boundary bisected on NVIDIA H200" in out


def test_the_boundaries_table_and_the_committed_truths_agree():
    """tests/data/memory_boundary holds the traces and truths that test_memory.py holds the prediction to; the
    predict part's table says the same boundaries for the same GPU model."""
    data = Path(__file__).parent / "data" / "memory_boundary"
    truths = [json.loads(f.read_text()) for f in sorted(data.glob("*/truth.json"))]
    assert len(truths) == 6
    for t in truths:
        assert mt.BOUNDARIES[t["device"]][t["family"]] == (t["boundary_fits"], t["boundary_oom"])
        assert t["base_batch"] == mt.FAMILIES[t["family"]][0]


def test_the_generated_programs_compile_for_every_family():
    for name in mt.FAMILIES:
        for code in (mt.BISECT_TRY, mt.SIZES_LOOP, mt.DDP_PEAK_LOOP, mt.PEAK_LOOP, mt.TRY_LOOP):
            compile(code.format(family=mt._family(name)), name, "exec")


def test_the_command_refuses_a_machine_without_cuda_in_one_line(tmp_path, capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert mt.main(["--out", str(tmp_path / "o"), "--parts", "bisect", "ddp_peaks"]) == 2
    err = capsys.readouterr().err
    assert err == "verify_memory.py: error: needs a CUDA device\n" and not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as e:
        mt.main(["--out", str(tmp_path), "--parts", "bisekt"])
    assert e.value.code == 2


def test_gpu_verify_sh_parses_and_has_the_memory_parts():
    assert subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu_verify.sh")]).returncode == 0
    text = (REPO / "scripts" / "gpu_verify.sh").read_text()
    for part in ("memory_bisect", "memory_ddp"):
        assert f"part_{part}()" in text and f"|{part}|" in text.replace(" ", "|").replace(")", "|")


def test_the_prediction_is_read_from_the_reports_json_of_the_recorded_loop(monkeypatch):
    """_predict on a committed H100 trace (the recorded loop's run replaced by the folder it would have written):
    the report's batch_scale_predicted and the peak's figures, as `stepscope analyze --json` gives them."""
    from stepscope.report.front import analyze
    folder = REPO / "tests" / "data" / "suite" / "gpt_large"
    monkeypatch.setattr(mt, "_run", lambda code, args, timeout=0: subprocess.CompletedProcess(args, 0, "", ""))
    got = mt._predict("gpt", folder, 16, 60)
    dev = analyze(folder).to_dict()["spans"][0]["memory"]["devices"][0]
    assert got["batch_scale_predicted"] == dev["batch_scale_predicted"] > 8
    assert got["capacity_gib"] == dev["capacity_gib"] and got["peak_reserved_gib"] == dev["peak_reserved_gib"]
    assert sum(got["composition_gib"].values()) == pytest.approx(got["peak_allocated_gib"], abs=1e-3)
    monkeypatch.setattr(mt, "_run", lambda code, args, timeout=0: subprocess.CompletedProcess(args, 1, "", "boom\n"))
    assert mt._predict("gpt", folder, 16, 60) == {"error": ["boom"]}


def test_ddp_peaks_on_a_machine_without_two_gpus_says_so_in_its_row(tmp_path, capsys):
    import torch
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has two GPUs")
    rows: list = []
    saved = []
    mt.ddp_peaks(tmp_path, rows, lambda: saved.append(list(rows)))
    assert rows == [{"family": "resnet50", "error": f"needs 2 GPUs, {torch.cuda.device_count()} here"}]
    assert saved and not (tmp_path / "ddp_peaks").exists()
    assert capsys.readouterr().out.startswith("ddp_peaks: needs 2 GPUs")
