"""`stepscope diff`: the step-time ratio of two runs with a confidence interval, on real CPU training runs.

Three small profiled runs of the trainer, started together so that they share the machine's load: two of
the same configuration (any difference is noise) and one with 32x the batch (a real change).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from stepscope.cli.diff import main as diff_main
from stepscope.report.diff import ratio_interval, t_quantile
from trainrun import REPO, TRAIN, run_json

LENET = ["--device", "cpu", "--arch", "lenet", "--synthetic-train-size", "512", "--synthetic-eval-size", "32",
         "--workers", "0", "--log-every", "4", "--steps", "16", "--profile", "--skip-first", "0", "--wait", "1",
         "--warmup", "1", "--active", "2"]
RUNS = {"same1": ["--batch-size", "16"], "same2": ["--batch-size", "16"], "big": ["--batch-size", "512"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("diff")
    # one thread each: runs on a shared machine, none spinning on cores the others need
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # the identical pair side by side, one core each, then the bigger batch: three runs at once on two cores
    # put one of the pair on a shared core, a real difference between "identical" runs
    for group in ([n for n in RUNS if n.startswith("same")], [n for n in RUNS if not n.startswith("same")]):
        procs = {name: subprocess.Popen([sys.executable, str(TRAIN), *LENET, *RUNS[name], "--logdir", str(logdir),
                                         "--run-name", name], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
                 for name in group}
        for name, p in procs.items():
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, f"{name}: {err[-3000:]}"
    return logdir


def diff(capsys, *argv) -> tuple[int, dict, str]:
    rc = diff_main([*map(str, argv), "--json"])
    out = capsys.readouterr()
    return rc, json.loads(out.out), out.err


def test_t_quantile_matches_the_tables():
    assert t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=1e-3)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.960, abs=1e-3)


def test_interval_holds_one_for_noise_and_not_for_a_shift():
    rng = np.random.default_rng(0)
    a = list(rng.normal(100, 5, 40))
    same = ratio_interval(a, list(rng.normal(100, 5, 40)), run_noise=0.0)
    slower = ratio_interval(a, list(rng.normal(110, 5, 40)), run_noise=0.0)
    assert same[1] <= 1.0 <= same[2]
    assert 1.0 < slower[1] < slower[0] == pytest.approx(1.1, abs=0.03) and slower[0] < slower[2]


def test_a_burst_of_slow_steps_is_one_block_not_many_samples():
    """Another process on the core slows a stretch of steps: those steps are a block or two of evidence, not a
    fifth of the run's independent samples (Welch on the 80 steps alone puts the interval above 1.05)."""
    rng = np.random.default_rng(1)
    a = list(rng.normal(100, 3, 80))
    b = list(rng.normal(100, 3, 80))
    b[30:46] = list(rng.normal(160, 10, 16))  # a neighbour's burst
    la, lb = np.log(a), np.log(b)
    welch_steps = lb.mean() - la.mean() - 1.96 * np.sqrt(la.var(ddof=1) / 80 + lb.var(ddof=1) / 80)
    assert np.exp(welch_steps) > 1.05
    ratio, low, high = ratio_interval(a, b)
    assert low <= 1.0 <= high, (ratio, low, high)
    assert ratio_interval(a, b, run_noise=0.0)[1] <= 1.0  # the blocks alone already hold it


def test_the_drift_between_runs_widens_the_interval():
    """Two runs of one configuration whose every step is 8% apart (the machine's load changed between them):
    with the run-to-run noise that is no significant change; with none it would be."""
    rng = np.random.default_rng(2)
    a = list(rng.normal(100, 2, 90))
    b = list(rng.normal(108, 2, 90))
    ratio, low, high = ratio_interval(a, b)
    assert low <= 1.0 <= high and ratio == pytest.approx(1.08, abs=0.02)
    assert ratio_interval(a, b, run_noise=0.0)[1] > 1.0
    # a step twice as long stands out of it
    assert ratio_interval(a, list(rng.normal(200, 4, 90)))[1] > 1.3


@pytest.mark.alone  # two identical runs timed side by side: a neighbouring test slows one of them
def test_identical_runs_show_no_significant_change(runs, capsys):
    # at 95% an interval misses 1.0 for one identical pair in twenty by construction: asked at 99.9% here
    rc, d, _ = diff(capsys, runs / "same1", runs / "same2", "--fail-above", "5%", "--confidence", "99.9%")
    assert rc == 0 and d["confidence"] == pytest.approx(0.999)
    assert d["source"] == "run.json" and d["a"]["steps"] >= 8 and d["b"]["steps"] >= 8
    final = run_json(runs / "same1")["final"]  # the trainer records every timed step's time
    assert len(final["step_times_ms"]) == final["timed_steps"] == d["a"]["steps"]
    # the pair ran side by side on a shared machine; where a run records that other processes held the CPUs
    # its threads waited for, the interval is widened by as much, and still holds 1.0
    assert not d["significant"] and d["low"] <= 1.0 <= d["high"], d["summary"]
    assert d["summary"].startswith("no significant change")
    sharing = d["cpu_sharing"]
    assert d["slowed_by_others"] == (sharing["a"]["slowed_by_others"] or sharing["b"]["slowed_by_others"])
    assert ("allowing for that" in d["summary"]) == d["slowed_by_others"]


@pytest.fixture(scope="module")
def quiet_runs(tmp_path_factory):
    """The batch of 16 and of 512, one after the other, each alone on the machine (the `alone` phase)."""
    logdir = tmp_path_factory.mktemp("quiet")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for name in ("same1", "big"):
        r = subprocess.run([sys.executable, str(TRAIN), *LENET, *RUNS[name], "--logdir", str(logdir),
                            "--run-name", name], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{name}: {r.stderr[-3000:]}"
    return logdir


@pytest.mark.alone
def test_a_bigger_batch_is_a_real_slowdown_and_fails_the_gate(quiet_runs, capsys):
    runs = quiet_runs
    rc, d, err = diff(capsys, runs / "same1", runs / "big", "--fail-above", "5%")
    # 32x the batch: beyond the noise, and beyond what other processes could have taken if the machine was busy
    assert d["significant"] and d["low"] > 1.05, d["summary"]
    assert rc == 1 and "regression" in err
    assert "slower" in d["summary"]
    # the other way round it is a speed-up: no regression
    rc, d, _ = diff(capsys, runs / "big", runs / "same1", "--fail-above", "5%")
    assert rc == 0 and d["significant"] and d["high"] < 1.0 and "faster" in d["summary"]


def test_a_run_slowed_by_other_processes_widens_the_interval(capsys, tmp_path):
    """A 2.6x slower run one of whose threads waited 70% of its ready time for CPUs that other processes held
    could be that much slower from the wait alone (1 / 0.3 = 3.3x): no regression, nor does the gate fail. The
    same pair without that record is one, and so is one whose wait (35.5%: at most 1.55x) cannot explain it."""
    steady = [10.0 + 0.3 * ((7 * k) % 5) for k in range(54)]  # a quiet run's steps: 10.0-11.2 ms
    base = run_json(NOISE / "same01a")
    base["final"]["step_times_ms"] = steady
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "run.json").write_text(json.dumps(base))
    a, slow = tmp_path / "a", json.loads(json.dumps(base))
    slow["final"]["step_times_ms"] = [t * 2.6 for t in steady]
    for name, sharing in (("plain", {}), ("shared", {"others_cpu_pct": 48.0, "waited_cpu_pct": 70.0}),
                          ("some_wait", {"others_cpu_pct": 48.0, "waited_cpu_pct": 35.5}),
                          ("big_host", {"others_cpu_pct": 48.0, "waited_cpu_pct": 1.0})):
        (tmp_path / name).mkdir()
        doc = json.loads(json.dumps(slow))
        doc["final"].update(sharing)
        (tmp_path / name / "run.json").write_text(json.dumps(doc))
    rc, d, err = diff(capsys, a, tmp_path / "plain", "--fail-above", "5%")
    assert rc == 1 and d["significant"] and d["ratio"] > 2, d["summary"]
    plain_low = d["low"]
    rc, d, _ = diff(capsys, tmp_path / "plain", a)
    plain_high = d["high"]
    rc, d, err = diff(capsys, a, tmp_path / "shared", "--fail-above", "5%")
    assert rc == 0 and not d["significant"] and "regression" not in err
    assert d["summary"].startswith("no significant change") and "48% of all CPUs" in d["summary"]
    assert d["low"] == pytest.approx(plain_low * 0.3) and d["slowed_by_others"]
    assert d["cpu_sharing"]["b"] == {"others_cpu_pct": 48.0, "waited_cpu_pct": 70.0, "slowed_by_others": True}
    rc, d, err = diff(capsys, a, tmp_path / "some_wait", "--fail-above", "5%")
    assert rc == 1 and d["significant"] and d["low"] == pytest.approx(plain_low * 0.645), d["summary"]
    assert "allowing for that" in d["summary"]
    # a thread that waited all the time it was ready (recorded as 100%): the widest interval, no crash
    slow["final"].update(others_cpu_pct=90.0, waited_cpu_pct=100.0)
    (tmp_path / "all_wait").mkdir()
    (tmp_path / "all_wait" / "run.json").write_text(json.dumps(slow))
    rc, d, err = diff(capsys, tmp_path / "all_wait", a, "--fail-above", "5%")
    assert rc == 0 and not d["significant"] and d["high"] == pytest.approx(plain_high * 1000), d["summary"]
    # other jobs on a big machine that left the run's threads the CPUs they wanted: judged as usual
    rc, d, err = diff(capsys, a, tmp_path / "big_host", "--fail-above", "5%")
    assert rc == 1 and d["significant"], d["summary"]


@pytest.mark.alone
def test_console_output_names_both_runs_and_the_breakdown(runs, capsys):
    assert diff_main([str(runs / "same1"), str(runs / "big")]) == 0
    out = capsys.readouterr().out
    assert "same1" in out and "big" in out and "breakdown, ms per step" in out and "cpu_ops" in out


@pytest.mark.parametrize("argv, message", [
    (["tests/data/no_such_run", "tests/data/cpu_resnet"], "not a directory or a trace file"),
    (["tests/data/cpu_resnet", "tests/data/cpu_resnet", "--fail-above", "five"], "--fail-above"),
    (["tests/data/cpu_resnet", "tests/data/cpu_resnet", "--confidence", "100%"], "--confidence"),
    (["tests/data/cpu_resnet", "tests/data/cpu_resnet", "tests/data/cpu_resnet"], "--vs"),
    (["tests/data/cpu_resnet", "--vs", "tests/data/no_such_run"], "not a directory or a trace file"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message):
    r = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "diff", *argv], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr


NOISE = REPO / "tests" / "data" / "diff_noise"


@pytest.mark.parametrize("pair", ["same01", "same02"])
def test_same_config_pairs_on_a_busy_machine_are_no_significant_change(pair, capsys):
    """Recorded same-config pairs (tests/data/diff_noise/README.md) whose steps drifted 1.7x and 2.8x with the
    machine's load: neither is a change, and neither fails the gate. The steps alone put 1.0 outside."""
    a, b = NOISE / f"{pair}a", NOISE / f"{pair}b"
    rc, d, err = diff(capsys, a, b, "--fail-above", "5%")
    assert rc == 0 and not d["significant"] and d["low"] <= 1.0 <= d["high"], d["summary"]
    assert d["source"] == "run.json" and d["summary"].startswith("no significant change")
    steps_a, steps_b = (run_json(p)["final"]["step_times_ms"] for p in (a, b))
    la, lb = np.log(steps_a), np.log(steps_b)
    se = np.sqrt(la.var(ddof=1) / len(la) + lb.var(ddof=1) / len(lb))
    assert abs(lb.mean() - la.mean()) > 1.96 * se  # what the steps alone said


def test_an_unprofiled_run_is_compared_from_run_json_and_config_changes_are_named(capsys, tmp_path):
    """Runs of the trainer made without --profile have no trace: diff compares their run.json step times, and
    names what differs in their configs beside the verdict."""
    for name, batch in (("small", 64), ("big", 128)):
        (tmp_path / name).mkdir()
        doc = run_json(NOISE / "same01a")
        doc["config"]["data"]["batch_size"] = batch
        (tmp_path / name / "run.json").write_text(json.dumps(doc))
    rc, d, _ = diff(capsys, tmp_path / "small", tmp_path / "big")
    assert rc == 0 and d["source"] == "run.json" and d["a"]["steps"] == 54
    assert d["config_changes"] == [{"key": "data.batch_size", "a": 64, "b": 128}]
    assert diff_main([str(tmp_path / "small"), str(tmp_path / "big")]) == 0
    first, second = capsys.readouterr().out.splitlines()[:2]
    assert first.startswith("no significant change") and second == "  config differs: data.batch_size 64 -> 128"
    # a run with neither traces nor step times is still bad input
    (tmp_path / "empty").mkdir()
    assert diff_main([str(tmp_path / "small"), str(tmp_path / "empty")]) == 2


def test_operators_come_from_full_tables_not_top_fives(capsys):
    """An operator that is in one run's top 5 and not in the other's still ran in both: diff shows both
    times from the full tables (it showed `0.05 -> n/a` when it compared the reports' top-5 lists)."""
    data = REPO / "tests" / "data"
    rc, d, _ = diff(capsys, data / "eager_bs32", data / "eager_bs128")
    assert rc == 0 and d["ops"]
    report = json.loads(subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", "--json",
                                        str(data / "eager_bs32")], capture_output=True, text=True,
                                       cwd=REPO, timeout=120).stdout)
    top_a = {op["name"] for span in report["spans"] for op in span["top"]}
    assert all(isinstance(r["a_ms"], float) and isinstance(r["b_ms"], float) for r in d["ops"]), d["ops"]
    outside = [r for r in d["ops"] if r["name"] not in top_a and r["a_ms"] > 0]
    assert outside, "expected an operator of eager_bs32 outside its top 5 among the changed ones"
    assert diff_main([str(data / "eager_bs32"), str(data / "eager_bs128")]) == 0
    assert "n/a (" not in capsys.readouterr().out


def test_several_runs_a_side_measure_the_drift_between_runs():
    """Runs whose levels drift by 8% (sd) from run to run, four a side: of 2,000 same-config pairs about one
    in twenty is called different at 95% (the interval is calibrated on the runs' own spread), while a 1.25x
    change, inside what one run a side can tell from that drift, is found in most pairs."""
    from stepscope.report.diff import levels_interval
    rng = np.random.default_rng(3)

    def side(shift: float, n: int = 4) -> list[float]:
        return list(np.log(100.0 * shift) + rng.normal(0, 0.08, n))

    same = [levels_interval(side(1.0), side(1.0)) for _ in range(2000)]
    false = sum(not lo <= 1.0 <= hi for _, lo, hi in same) / len(same)
    assert 0.03 < false < 0.07, false
    found = sum(lo > 1.0 for _, lo, _ in (levels_interval(side(1.0), side(1.25)) for _ in range(300))) / 300
    assert found > 0.8, found
    # one run a side, by the floor of 12% a run: the same 1.25x change is rarely found
    one = [ratio_interval([100.0] * 40, [125.0 * s for s in np.exp(rng.normal(0, 0.08, 1))] * 40)
           for _ in range(50)]
    assert sum(lo > 1.0 for _, lo, _ in one) < 25
    # a side of a single run drifts as the other side's runs do (Student's, their degrees of freedom)
    ratio, low, high = levels_interval([np.log(100.0)], side(1.0, 5))
    assert low < ratio < high and high / low < 2.0
    with pytest.raises(ValueError):
        levels_interval([1.0], [1.0])


def _runs(tmp_path, name: str, factors: list[float], **config) -> list:
    """One run.json per factor: the recorded steps of a real run of the trainer, each scaled by its factor."""
    base = run_json(NOISE / "same01a")
    out = []
    for i, f in enumerate(factors):
        doc = json.loads(json.dumps(base))
        doc["final"]["step_times_ms"] = [10.0 * f * (1 + 0.02 * ((7 * k) % 5)) for k in range(40)]
        for key, value in config.items():
            doc["config"]["data"][key] = value[i] if isinstance(value, list) else value
        (tmp_path / f"{name}{i}").mkdir()
        (tmp_path / f"{name}{i}" / "run.json").write_text(json.dumps(doc))
        out.append(tmp_path / f"{name}{i}")
    return out


def test_diff_vs_compares_sides_of_several_runs(capsys, tmp_path):
    """`stepscope diff A1 A2 A3 --vs B1 B2 B3`: a 1.3x slower side beyond runs that drift by about 6% is a
    regression; the same sides swapped are faster; one side's drift alone, however large its steps' own
    agreement, is no change."""
    a = _runs(tmp_path, "a", [1.0, 1.06, 0.95], batch_size=64, seed=[1, 2, 3])
    b = _runs(tmp_path, "b", [1.31, 1.25, 1.36], batch_size=64, seed=[1, 2, 3])
    c = _runs(tmp_path, "c", [1.07, 0.93, 1.02], batch_size=128, seed=[4, 5, 6])
    rc, d, err = diff(capsys, *a, "--vs", *b, "--fail-above", "5%")
    assert rc == 1 and d["significant"] and d["low"] > 1.05 and "regression" in err, d["summary"]
    assert d["noise"] == "runs" and d["run_noise"] is None and "3 vs 3 runs" in d["summary"]
    assert d["ratio"] == pytest.approx(np.exp(np.mean(np.log([1.31, 1.25, 1.36])) - np.mean(np.log([1.0, 1.06, 0.95]))),
                                       rel=1e-6)
    assert d["a"]["runs"] == [str(p) for p in a] and d["a"]["steps"] == 120
    assert d["config_changes"] == []  # the seeds differ run by run, alike on both sides
    rc, d, _ = diff(capsys, *b, "--vs", *a, "--fail-above", "5%")
    assert rc == 0 and d["significant"] and d["high"] < 1.0 and "faster" in d["summary"]
    rc, d, _ = diff(capsys, *a, "--vs", *c, "--fail-above", "5%")
    assert rc == 0 and not d["significant"] and d["summary"].startswith("no significant change"), d["summary"]
    assert d["config_changes"] == [{"key": "data.batch_size", "a": 64, "b": 128},
                                   {"key": "data.seed", "a": [1, 2, 3], "b": [4, 5, 6]}]
    # one run against a side of three: the single run is taken to drift as the three do
    rc, d, _ = diff(capsys, a[0], "--vs", *b)
    assert d["significant"] and d["a"]["runs"] == [str(a[0])] and "1 vs 3 runs" in d["summary"]
    # the console lists each side's runs
    assert diff_main([*map(str, a), "--vs", *map(str, b)]) == 0
    out = capsys.readouterr().out
    assert f"a0 +2: {a[0]}, {a[1]}, {a[2]}" in out and "3 vs 3 runs" in out.splitlines()[0]
