"""scripts/calibrate_overhead.py end to end on the CPU, a tiny model, the plain loop (on a GPU:
`bash scripts/gpu_verify.sh OUT calibrate`).

    pytest tests/test_calibrate_overhead.py -q        # about 15 s on 2 idle cores
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_calibration_writes_predicted_vs_measured(tmp_path):
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "calibrate_overhead.py"), "--out", str(tmp_path),
                        "--device", "cpu", "--families", "tiny", "--styles", "eager", "--options", "none,shapes",
                        "--steps", "6", "--warmup", "2"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json.loads((tmp_path / "calibration.json").read_text())["rows"]
    assert [(r["family"], r["style"], r["recording"]) for r in rows] == [("tiny", "eager", "none"),
                                                                        ("tiny", "eager", "shapes")]
    for r in rows:
        assert r["measured_ms"] > 0 and r["predicted_ms"] > 0 and r["verdict"] in ("cpu_bound", "host_bound")
        lo, hi = r["range_ms"]
        assert lo < r["predicted_ms"] < hi and r["loop_style_read"] == "eager"
        assert r["ratio"] == r["measured_ms"] / r["predicted_ms"]
    assert "| tiny | eager | shapes |" in p.stdout and "suggested band" in p.stdout
    assert sorted(q.name for q in tmp_path.iterdir()) == ["calibration.json", "tiny-eager-none", "tiny-eager-shapes"]
    joined = subprocess.run([sys.executable, str(REPO / "scripts" / "calibrate_overhead.py"), "--table",
                             str(tmp_path / "calibration.json"), str(tmp_path / "calibration.json")],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert joined.stdout.count("| tiny | eager | shapes |") == 2 and "| eager | False | 4 |" in joined.stdout
