"""scripts/verdict_bench.py --device cpu: the CPU subset of the verdict benchmark, run for real, and its command
line. Four scenarios with an injected cause each (bench.verdicts.cpu): convolutions (cpu_bound), a
DataLoader sleeping 10 ms a sample in the main process into a pooled linear classifier (data_bound), 2M Python
iterations after each step of that classifier (host_bound), and a 64 MB gradient all-reduced over gloo by 2
ranks under torchrun (communication_bound). The truth is measured without the profiler, and the cause removed
is timed in alternation with the step, so that a load on the shared machine falls on both alike. Each injected
cause outweighs the rest of its step many times over, so that CI's other test process cannot tip a verdict.
About 40 s on 2 cores. The benchmark runs in this process through its main(argv) (torch is imported here
anyway; torchrun's ranks are processes of their own); the refusals' messages are checked in-process too, and
one refusal as a real process."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.verdicts.bench import main
from in_process import run_main
from trainrun import REPO

BENCH = [sys.executable, str(REPO / "scripts" / "verdict_bench.py")]
EXPECTED = {"cpu_compute": "cpu_bound", "cpu_loader": "data_bound", "cpu_host_python": "host_bound",
            "cpu_comm": "communication_bound"}


def in_process(argv: list[str], capsys) -> subprocess.CompletedProcess:
    """verdict_bench.py's main(argv) in this process (in_process.run_main), as a finished process."""
    return subprocess.CompletedProcess(argv, *run_main(main, argv, capsys))


def test_cpu_subset_confusion_matrix_is_diagonal(tmp_path, capsys):
    r = in_process(["--device", "cpu", "--out", str(tmp_path)], capsys)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    rows = {row["scenario"]: row for row in result["rows"]}
    assert set(rows) == set(EXPECTED), rows.keys()
    for name, verdict in EXPECTED.items():
        truth, diagnosis = rows[name]["truth"], rows[name]["diagnosis"]
        assert truth["expected"] == verdict, (name, truth)
        assert diagnosis["verdict"] == verdict, (name, diagnosis)
        if truth["fixed_step_ms"] is not None:  # the cause, removed, speeds the step up: it was the cause
            assert truth["confirmed"] and truth["step_ms"] / truth["fixed_step_ms"] >= 1.15, (name, truth)
    score = result["score"]
    labels = score["labels"]
    assert labels == sorted(EXPECTED.values())
    assert score["matrix"] == [[int(i == j) for j in range(len(labels))] for i in range(len(labels))]
    assert all(v["precision"] == v["recall"] == 1.0 for v in score["per_verdict"].values())
    md = (tmp_path / "results.md").read_text()
    assert "| expected \\ diagnosed | communication_bound | cpu_bound | data_bound | host_bound |" in md
    assert "Right: 4 of 4 counted scenarios" in md and md in r.stdout
    assert (tmp_path / "traces" / "cpu_comm" / "truth.json").exists()


def test_bad_flags_get_one_line_and_exit_2(tmp_path, capsys):
    for args, message in ((["--device", "cpu"], "--out is required"),
                          (["--device", "cpu", "--out", str(tmp_path), "--only", "gpt_tiny"],
                           "unknown scenario 'gpt_tiny' for --device cpu"),
                          (["--device", "cpu", "--set", "holdout", "--out", str(tmp_path)],
                           "--set holdout is a GPU set"),
                          (["--rescore", str(tmp_path / "missing")], "not a directory of an earlier run")):
        r = in_process(args, capsys)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())
    # the script as a process: the one line on stderr and exit code 2
    r = subprocess.run([*BENCH, "--rescore", str(tmp_path / "missing")], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a directory of an earlier run" in r.stderr, r.stderr


def test_holdout_names_match_their_workloads():
    from bench.verdicts import bench, gpu, holdout

    assert tuple(holdout.HOLDOUT) == bench.HOLDOUT_ORDER
    assert set(gpu.WORKLOADS) == set(bench.GPU_ORDER)
    assert not set(bench.HOLDOUT_ORDER) & set(bench.GPU_ORDER)


def test_the_balanced_ddp_truth_follows_the_suites_rule():
    """scripts/verdict_ddp.py --case balanced: the expected verdict from the step and its CUDA-graph replay,
    as the single-GPU suite decides it (the GPU-bound share, then a confirming speed-up); none on the CPU."""
    from bench.verdicts.ddp import balanced_expected

    truth = json.loads((REPO / "tests" / "data" / "suite_ddp" / "balanced_skew" / "truth.json").read_text())
    assert balanced_expected(truth["step_ms"], truth["fixed_step_ms"]) == (truth["expected"], truth["confirmed"])
    assert balanced_expected(1.9, 0.1) == ("launch_bound", True)
    assert balanced_expected(1.9, 1.8) == ("gpu_bound", True)  # the replay is most of the step
    assert balanced_expected(1.9, 0.9) == ("launch_bound", True)
    assert balanced_expected(1.0, 0.49) == ("launch_bound", True)
    assert balanced_expected(1.9, None) == (None, None)  # gloo on CPUs: no graph


def test_bench_nvml_busy_refuses_an_out_path_in_no_folder(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_nvml_busy.py"), "--out",
                        str(tmp_path / "missing" / "rows.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1 and "no such folder" in r.stderr
