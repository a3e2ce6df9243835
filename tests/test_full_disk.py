"""A run whose --logdir fills up: one line on stderr, exit code 2, no temporary file left behind.

    python -m pytest -q tests/test_full_disk.py

The logdir is a 1 MiB tmpfs mounted for the test (needs root with CAP_SYS_ADMIN; skipped, saying so,
where mounting is not allowed). The profiled cycle's trace does not fit, so the export fails.
"""

from __future__ import annotations

import json
import re

import pytest
from tmpfs import mounted_tmpfs
from trainrun import FAST, PROFILE_3_STEPS, run_train

# no assertion here depends on the model; LeNet's run costs less than ResNet-8's, and its profiled cycle's
# trace still overflows both disks at the export
LENET = ["--arch", "lenet"]
# one OpenMP thread (what torchrun gives each rank): a second one spins for work on a loaded 2-core machine
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
PROGRESS = re.compile(r"step \d+/\d+")


def error_lines(stderr: str) -> list[str]:
    """stderr without the progress (tqdm's bar, or the plain "step N/M" line every few seconds on a slow
    machine)."""
    return [ln for ln in stderr.replace("\r", "\n").splitlines() if ln.strip() and "it/s" not in ln
            and "step/s" not in ln and "s/step" not in ln and not PROGRESS.match(ln)]


@pytest.fixture
def tiny_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "size=1m") as mnt:
        yield mnt


# The same path (the export fails; one line, exit 2; run.json ends "failed" through the reserve) on a smaller
# disk, with every assertion of this test: test_run_json_ends_failed_on_a_disk_too_full_for_the_usual_reserve.
# Only the reserve's size differs, and test_the_reserve_is_measured_from_the_smallest_final_record checks it.
@pytest.mark.slow
def test_full_disk_during_the_trace_export(tiny_disk):
    r = run_train([*FAST, *LENET, *PROFILE_3_STEPS, "--steps", "6", "--logdir", str(tiny_disk / "logs"),
                   "--run-name", "f"], ONE_THREAD)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = error_lines(r.stderr)
    assert len(lines) == 1, lines
    assert lines[0].startswith("train.py: error: no space left on device writing ") and "Traceback" not in r.stderr
    run = tiny_disk / "logs" / "f"
    left = [p.name for p in run.rglob("*") if p.name.startswith(".tmp-") or ".partial" in p.name]
    assert not left, left
    # run.json was written at the start; the room set aside beside it lets its last update say "failed"
    assert json.loads((run / "run.json").read_text())["status"] == "failed"
    assert not (run / ".run.json.reserve").exists()


def test_run_json_ends_failed_on_a_disk_too_full_for_the_usual_reserve(tmp_path):
    """256 KiB: too small for a 256 KiB reserve beside run.json; the reserve is sized from the smallest final
    record instead, and run.json still says "failed" (it stayed "running", with stdout saying failed). The
    profiled cycle's trace does not fit: its export fails with one line on stderr."""
    with mounted_tmpfs(tmp_path / "mnt", "size=256k") as disk:
        r = run_train([*FAST, *LENET, *PROFILE_3_STEPS, "--steps", "6", "--logdir", str(disk / "logs"),
                       "--run-name", "f"], ONE_THREAD)
        assert r.returncode == 2, r.stderr[-3000:]
        lines = error_lines(r.stderr)
        assert len(lines) == 1, lines
        assert lines[0].startswith("train.py: error: no space left on device writing ") and "Traceback" not in r.stderr
        assert "/raw/" in lines[0], lines  # the cycle's trace, being exported
        run = disk / "logs" / "f"
        record = json.loads((run / "run.json").read_text())
        steps = int(re.match(r"failed: (\d+) steps", r.stdout.splitlines()[-1]).group(1))
        assert record["status"] == "failed" and record["final"]["steps"] == steps
        assert not (run / ".run.json.reserve").exists()
        assert not [p.name for p in run.rglob("*") if p.name.startswith(".tmp-") or ".partial" in p.name]


def start_record(run_dir):
    from stepscope.demo.run_record import RunRecord

    return RunRecord(config={"model": {"arch": "resnet8"}, "notes": "x" * 3000}, environment={"torch": "2"},
                     git_sha=None, world_size=1, global_batch_size=32, distributed={}, step_kind="eager",
                     run_dir=str(run_dir))


def test_the_reserve_is_measured_from_the_smallest_final_record(tmp_path):
    from dataclasses import replace

    from stepscope.demo.finish import reserve_bytes, widest_final

    record = start_record(tmp_path)
    end = replace(record, status="interrupted", signal="SIGTERM", final=widest_final(),
                  loss_history=[[i, 1.0] for i in range(10000)], traces=["a"] * 100)
    smallest = len(end.smallest().text().encode())
    assert smallest < len(end.text().encode()) / 10  # the loss history and the traces are what can go
    assert smallest + 4096 <= reserve_bytes(record) <= smallest + 3 * 4096


def test_the_last_record_is_written_on_a_disk_with_no_room_and_no_reserve(tmp_path):
    from dataclasses import replace

    from stepscope.demo.finish import write_last

    with mounted_tmpfs(tmp_path / "mnt", "size=64k") as disk:
        record = start_record(disk)
        record.write(disk)
        with open(disk / "filler", "wb", buffering=0) as f:  # the run's other files took every page left
            try:
                while True:
                    f.write(bytes(4096))
            except OSError:
                pass
        done = replace(record, status="failed", final={"steps": 19},
                       loss_history=[[i, 1.0] for i in range(2000)])
        write_last(done, disk)
        written = json.loads((disk / "run.json").read_text())
        assert written["status"] == "failed" and written["final"] == {"steps": 19}
        assert written["loss_history"] == []  # what the disk had no room for
        assert not [p.name for p in disk.iterdir() if p.name.startswith(".tmp-")]
