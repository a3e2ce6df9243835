"""An N-rank job built from the real 2-rank NCCL job in tests/data/suite_ddp/balanced (bench.ranks),
with stragglers of a known cause: the analysis names each straggler and states its injected cause.

    pytest tests/test_bench_ranks.py -q
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import stepscope
from bench.ranks import (
    DATALOADER_RANGE,
    INJECTED_RANGE,
    TRUTH,
    JobSpec,
    Straggler,
    build_job,
    rank_path,
)
from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace

# the benchmark harness (scripts/bench/), not the product: run with `python -m pytest -q -m slow`
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# comfortably above the rule's floor: the profiler's modelled host cost on these ranks is about 2 ms per step
INJECTED_MS = 5.0
WHERE = {"host_outside_ops": INJECTED_RANGE, "data": DATALOADER_RANGE}


@pytest.fixture(scope="module")
def built64(tmp_path_factory) -> Path:
    spec = JobSpec(ranks=64, stragglers=(Straggler(rank=37, cause="host_outside_ops", ms_per_step=INJECTED_MS),))
    return build_job(spec, tmp_path_factory.mktemp("ranks") / "job64")


def test_each_copy_is_its_own_rank(built64):
    files = discover(built64).traces
    assert len(files) == 64 and len({f.worker for f in files}) == 64
    for r in (0, 37, 63):
        trace = load_trace(rank_path(JobSpec(ranks=64), r, built64))
        assert trace["distributedInfo"]["rank"] == r and trace["distributedInfo"]["world_size"] == 64
        assert trace["distributedInfo"]["backend"] == "nccl"
    truth = json.loads((built64 / TRUTH).read_text())
    assert truth["stragglers"] == [{"rank": 37, "cause": "host_outside_ops", "ms_per_step": INJECTED_MS}]


def test_64_ranks_one_straggler_named_with_its_injected_cause(built64):
    truth = json.loads((built64 / TRUTH).read_text())
    report = stepscope.analyze(built64)
    (cycle,) = report.distributed
    assert len(cycle.ranks) == 64
    assert list(cycle.stragglers) == [s["rank"] for s in truth["stragglers"]] == [37]
    (why,) = cycle.why
    assert why.rank == 37 and why.causes == (truth["stragglers"][0]["cause"],)
    assert why.names[0].name == INJECTED_RANGE
    # the injected time, seen through a rank's own jitter (2%) and the spread between the two source ranks
    assert why.names[0].delta_ms == pytest.approx(INJECTED_MS, rel=0.1)


def test_the_command_states_the_cause_in_its_json(built64):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "analyze.py"), str(built64), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    (dist,) = json.loads(p.stdout)["distributed"]
    assert dist["stragglers"] == [37]
    (why,) = dist["stragglers_why"]
    assert why["rank"] == 37 and why["causes"] == ["host_outside_ops"]
    assert "host work outside torch ops" in why["text"] and INJECTED_RANGE in why["text"]


def test_several_stragglers_each_get_their_own_reason(tmp_path):
    injected = (Straggler(1, "gpu_kernels", INJECTED_MS), Straggler(4, "data", INJECTED_MS),
                Straggler(6, "host_outside_ops", INJECTED_MS))
    out = build_job(JobSpec(ranks=12, stragglers=injected, seed=3), tmp_path / "job12")
    (cycle,) = stepscope.analyze(out).distributed
    assert cycle.stragglers == (1, 4, 6)
    assert [(w.rank, w.causes) for w in cycle.why] == [(s.rank, (s.cause,)) for s in injected]
    for w, s in zip(cycle.why, injected, strict=True):
        if s.cause in WHERE:
            assert w.names[0].name == WHERE[s.cause]
        else:  # slower kernels: the differing names are kernels of this rank
            assert w.names and all(n.phase == "gpu_kernels" for n in w.names)


def test_a_job_without_injection_names_no_straggler(tmp_path):
    out = build_job(JobSpec(ranks=16, seed=7), tmp_path / "balanced16")
    (cycle,) = stepscope.analyze(out).distributed
    assert cycle.stragglers == () and cycle.why == ()


def test_repeated_steps_keep_a_rank_s_step_and_grow_its_file(tmp_path):
    one = build_job(JobSpec(ranks=2, jitter=0.0), tmp_path / "one")
    three = build_job(JobSpec(ranks=2, jitter=0.0, repeat=3, gz=True), tmp_path / "three")
    a, b = (stepscope.analyze(d) for d in (one, three))
    for sa, sb in zip(a.spans, b.spans, strict=True):
        assert sb.profiled.steps > 2 * sa.profiled.steps
        assert sb.profiled.kernels_per_step == pytest.approx(sa.profiled.kernels_per_step, rel=0.05)
        assert sb.breakdown_profiled.ms_per_step("gpu_busy") == pytest.approx(
            sa.breakdown_profiled.ms_per_step("gpu_busy"), rel=0.05)
    path = rank_path(JobSpec(ranks=2, gz=True), 1, three)
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = [e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(steps) == len(set(steps)) == 9
    corr = [e["args"]["correlation"] for e in events if e.get("cat") == "kernel"]
    assert len(corr) == len(set(corr))  # each copy of a step launches its own kernels


@pytest.mark.parametrize("bad", [dict(ranks=0), dict(ranks=4, stragglers=(Straggler(4, "data", 1.0),)),
                                 dict(ranks=4, stragglers=(Straggler(1, "disk", 1.0),)),
                                 dict(ranks=4, stragglers=(Straggler(1, "gpu_kernels", 1.0),),
                                      sources=(str(ROOT / "tests" / "data" / "ddp_gloo"),))])  # CPU ranks
def test_a_bad_spec_is_refused(tmp_path, bad):
    with pytest.raises(ValueError):
        build_job(JobSpec(**bad), tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_a_local_dask_cluster_gives_the_same_report(built64):
    pytest.importorskip("distributed")  # the cluster extra, which CI installs
    local, cluster = (subprocess.run([sys.executable, str(ROOT / "scripts" / "analyze.py"), str(built64), "--json",
                                      *extra], capture_output=True, text=True, timeout=300, cwd=ROOT)
                      for extra in ((), ("--cluster", "local:2")))
    assert local.returncode == 0 and cluster.returncode == 0, cluster.stderr
    assert cluster.stdout == local.stdout
    (dist,) = json.loads(cluster.stdout)["distributed"]
    assert [(w["rank"], w["causes"]) for w in dist["stragglers_why"]] == [(37, ["host_outside_ops"])]


def test_the_benchmark_builds_a_job_and_checks_its_verdict(tmp_path):
    script = ROOT / "scripts" / "bench_ranks.py"
    b = subprocess.run([sys.executable, str(script), "build", "--ranks", "4", "--straggler", "2:data:5",
                        "--out", str(tmp_path / "r4")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert b.returncode == 0, b.stderr
    assert json.loads((tmp_path / "r4" / TRUTH).read_text())["stragglers"] == [
        {"rank": 2, "cause": "data", "ms_per_step": 5.0}]
    m = subprocess.run([sys.executable, str(script), "measure", str(tmp_path / "r4"), "--workers", "1"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert m.returncode == 0, m.stderr
    (row,) = [line for line in m.stdout.splitlines() if line.startswith("| 4 |")]
    assert row.split("|")[4].strip() == "local" and row.rstrip().endswith("| ok |")


def test_the_benchmark_measures_against_a_running_cluster(tmp_path):
    """``--cluster`` adds ``dask`` (local:K, started inside the timing) and ``running`` (a cluster started before
    it): both name the injected straggler."""
    pytest.importorskip("distributed")
    script = ROOT / "scripts" / "bench_ranks.py"
    b = subprocess.run([sys.executable, str(script), "build", "--ranks", "4", "--straggler", "2:data:5",
                        "--out", str(tmp_path / "r4")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert b.returncode == 0, b.stderr
    m = subprocess.run([sys.executable, str(script), "measure", str(tmp_path / "r4"), "--workers", "1",
                        "--cluster"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert m.returncode == 0, m.stderr
    rows = {cells[4]: cells for cells in ([c.strip() for c in line.split("|")] for line in m.stdout.splitlines()
                                          if line.startswith("| 4 |"))}
    assert set(rows) == {"local", "dask", "running"}
    assert all(cells[-2] == "ok" for cells in rows.values())
    assert float(rows["running"][9]) > 0  # the workers' peak RSS (MiB), read in each worker after the run


def test_a_process_reads_its_own_peak_memory():
    from bench.rank_scaling import _own_peak_kib

    assert _own_peak_kib() > 10_000  # KiB: this interpreter with pytest and stepscope loaded
