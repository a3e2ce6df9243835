"""Analysis time and peak memory of an N-rank job vs ranks and vs workers, and its straggler verdict vs the truth.

    python scripts/bench_ranks.py build --ranks 64 --out /tmp/ranks/r64                  # 64 ranks, 0.6 MB each
    python scripts/bench_ranks.py build --ranks 1024 --rank-mb 16 --out /tmp/ranks/r1024 --workers 16
    python scripts/bench_ranks.py measure /tmp/ranks/r64 --workers 1,2 [--cluster] [--hta]
    python scripts/bench_ranks.py sweep --ranks 8,64 --workers 1,2 --scratch /tmp/ranks  # build + measure each

``build`` writes an N-rank job from the recorded NCCL ranks of tests/data/suite_ddp/balanced with
bench.ranks: each rank's steps repeated until it holds about ``--rank-mb`` MB of JSON, 2% timing
jitter per rank, and the stragglers of ``--straggler RANK:CAUSE:MS`` (default: one, rank N//2 + 1, 5 ms per
step of host work outside ops), with the truth in truth.json.

``measure`` analyses a built job once per engine and worker count, each in its own subprocess, sampling the
peak RSS of its processes (memory.py), and prints one Markdown row each:
  ``local``  the embedded engine (front.analyze with ``Workers.local(cpus=K)``: up to K forked processes, as the memory
             budget allows; jobs under 64 MB of JSON in all stay in one process);
  ``dask``   ``stepscope analyze --cluster local:K`` (a Dask LocalCluster of K worker processes), where the
             installed stepscope has ``--cluster`` (the ``cluster`` extra): the cluster's start and stop are
             inside the timing;
  ``running`` ``stepscope analyze --cluster tcp://...`` against a LocalCluster of K worker processes started
             before the timing and stopped after it, as a user's running cluster would be: the analysis
             alone. Its memory columns are those of the cluster's workers (each one's VmHWM, read in the
             worker after the run; the largest, and their sum), not of the measured command;
  ``hta``    Holistic Trace Analysis on the same folder: ``TraceAnalysis`` loading every rank (in its own
             process pool) and its ``get_temporal_breakdown()`` (idle / compute / non-compute time per
             rank), where it is installed (``pip install -e ".[bench]"``).
The columns: wall seconds, the efficiency (the engine's one-worker wall time / (wall time x workers)), CPU
seconds (the process tree), the peak RSS of the largest process and the tree's
peak proportional set size (MiB; shared pages counted once), and whether the stragglers the analysis names
and the cause it states for each are those of truth.json (``hta`` names no straggler; its column is -).

``sweep`` builds the jobs of ``--ranks`` in ``--scratch`` (reusing one built before with the same spec) and
measures each; ``--keep`` leaves them there.

The scaling points, on a 16-core machine (each line well within 10 minutes; 1,024 ranks of 16 MB are 16 GB
of JSON on disk):

    python scripts/bench_ranks.py sweep --ranks 8,64 --rank-mb 16 --workers 1,2,4,8,16 --cluster --hta \
        --scratch /tmp/ranks --build-workers 16
    python scripts/bench_ranks.py sweep --ranks 256 --rank-mb 16 --workers 1,2,4,8,16 --cluster \
        --scratch /tmp/ranks --build-workers 16
    python scripts/bench_ranks.py sweep --ranks 1024 --rank-mb 16 --workers 1,8,16 --cluster \
        --scratch /tmp/ranks --build-workers 16
    python scripts/bench_ranks.py sweep --ranks 64 --rank-mb 100 --workers 1,8,16 --cluster \
        --scratch /tmp/ranks --build-workers 16
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

from stepscope.trace.workers import json_size

from bench import REPO
from bench.memory import measure_command
from bench.ranks import CAUSES, TRUTH, JobSpec, Straggler, build_job, write_rank

ENGINES = ("local", "dask", "running", "hta")


def _copy_mb() -> float:
    """MB of JSON one copy of the source's steps makes: one rank built with one copy, measured."""
    with tempfile.TemporaryDirectory() as tmp:
        return write_rank(JobSpec(ranks=1), 0, Path(tmp)).stat().st_size / 1e6


def spec_for(ranks: int, rank_mb: float, stragglers: list[str] | None, seed: int = 0) -> JobSpec:
    repeat = max(1, round(rank_mb / _copy_mb())) if rank_mb else 1
    if stragglers is None:
        stragglers = [f"{ranks // 2 + 1 if ranks > 2 else ranks - 1}:host_outside_ops:5"]
    parsed = []
    for text in stragglers:
        try:
            rank, cause, ms = text.split(":")
            parsed.append(Straggler(int(rank), cause, float(ms)))
        except ValueError:
            raise ValueError(f"--straggler {text}: expected RANK:CAUSE:MS, CAUSE one of {', '.join(CAUSES)}") \
                from None
    return JobSpec(ranks=ranks, repeat=repeat, stragglers=tuple(parsed), seed=seed)


def build(spec: JobSpec, out: Path, workers: int) -> Path:
    """The job of ``spec`` in ``out``, built unless the truth there says it was built with this spec."""
    truth = out / TRUTH
    if truth.exists():
        t = json.loads(truth.read_text())
        if (t["world_size"], t["repeat"], t["stragglers"], t["seed"]) == (
                spec.ranks, spec.repeat, [s.__dict__ for s in sorted(spec.stragglers, key=lambda s: s.rank)],
                spec.seed):
            return out
        shutil.rmtree(out)
    t0 = time.perf_counter()
    build_job(spec, out, workers)
    mb = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    print(f"built {out}: {spec.ranks} ranks x {spec.repeat} copies of the steps, {mb:.0f} MB, "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


def _cluster_available() -> bool:
    """The installed analyze command takes --cluster, and Dask is installed."""
    helped = subprocess.run([sys.executable, str(REPO / "scripts" / "analyze.py"), "--help"], capture_output=True,
                            text=True)
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return "--cluster" in helped.stdout


def _hta_available() -> bool:
    try:
        import hta  # noqa: F401
    except ImportError:
        return False
    return True


def run_engine(engine: str, job: Path, workers: int, out: Path, address: str | None = None) -> None:
    """In the measured subprocess: analyse ``job`` with ``engine`` and write what it found to ``out``
    (``address``: the running cluster's scheduler, for ``running``)."""
    if engine == "local":
        from stepscope.analysis.json_out import dumps
        from stepscope.report.front import analyze
        from stepscope.trace.workers import Workers

        out.write_text(dumps(analyze(job, workers=Workers.local(cpus=workers)).to_dict()))
    elif engine in ("dask", "running"):
        from stepscope.cli.analyze import main

        cluster = f"local:{workers}" if engine == "dask" else address
        with open(out, "w") as f, redirect_stdout(f):
            rc = main([str(job), "--json", "--cluster", cluster])
        if rc:
            raise SystemExit(rc)
    else:
        hta_dir = out.with_suffix(".hta")  # HTA reads every *.json of its folder: the ranks only
        hta_dir.mkdir(exist_ok=True)
        for p in job.iterdir():
            if p.name != TRUTH and not (hta_dir / p.name).exists():
                (hta_dir / p.name).symlink_to(p.resolve())
        from hta.trace_analysis import TraceAnalysis

        analyzer = TraceAnalysis(trace_dir=str(hta_dir))
        table = analyzer.get_temporal_breakdown(visualize=False)
        out.write_text(table.to_json())


def verdict_check(engine: str, job: Path, out: Path) -> str:
    """'ok' when the named stragglers and their stated causes are the truth's; else what differs."""
    if engine == "hta":
        return "-"
    truth = {s["rank"]: s["cause"] for s in json.loads((job / TRUTH).read_text())["stragglers"]}
    (dist,) = json.loads(out.read_text())["distributed"][:1]
    named = {w["rank"]: w["causes"][0] if w["causes"] else None for w in dist["stragglers_why"]}
    if named == truth:
        return "ok"
    return f"named {named}, truth {truth}"


def measure(job: Path, engines: list[str], workers: list[int], repeat: int, hta_max_ranks: int = 64
            ) -> list[str]:
    rows = []
    n = json.loads((job / TRUTH).read_text())["world_size"]
    if n > hta_max_ranks and "hta" in engines:
        print(f"skipping hta on {n} ranks (over --hta-max-ranks {hta_max_ranks})", file=sys.stderr)
        engines = [e for e in engines if e != "hta"]
    files = [p for p in job.iterdir() if p.name != TRUTH]
    mb = sum(json_size(p) for p in files) / 1e6
    for engine in engines:
        one = None  # the engine's wall time with one worker, for the efficiency column
        for k in workers if engine != "hta" else [1]:
            out = job.parent / f".{job.name}.{engine}{k}.json"
            cmd = [sys.executable, "-m", "bench.rank_scaling", "_run", engine, str(job), str(k), str(out)]
            best = None
            with _running(engine, k) as (address, worker_peaks):
                for _ in range(repeat):
                    got = measure_command(cmd + (["--address", address] if address else []))
                    best = got if best is None or got[0] < best[0] else best
            wall, cpu, largest, _, held = best
            if worker_peaks:  # the running cluster's workers did the work: their memory, not the client's
                largest, held = max(worker_peaks), sum(worker_peaks)
            label = k if engine != "hta" else "own pool"
            one = wall if k == 1 else one
            eff = f"{one / (wall * k):.2f}" if one is not None and engine != "hta" else "-"
            rows.append(f"| {n} | {mb / n:.1f} | {mb:.0f} | {engine} | {label} | {wall:.2f} | {eff} | {cpu:.2f} | "
                        f"{largest:.0f} | {held:.0f} | {verdict_check(engine, job, out)} |")
            print(rows[-1], flush=True)
    return rows


@contextmanager
def _running(engine: str, workers: int):
    """For ``running``: a LocalCluster of ``workers`` processes for the block, yielding (its scheduler's
    address, a list that receives each worker's peak RSS in MiB at the block's end); else (None, [])."""
    if engine != "running":
        yield None, []
        return
    from distributed import Client
    from stepscope.trace.cluster import open_cluster

    peaks: list[float] = []
    with open_cluster(f"local:{workers}") as address:
        yield address, peaks
        with Client(address, set_as_default=False) as client:
            peaks += [kib / 1024 for kib in client.run(_own_peak_kib).values()]


def _own_peak_kib() -> int:
    """This process's VmHWM (KiB): run in each Dask worker."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


HEADER = ("| ranks | MB/rank | job MB | engine | workers | wall s | efficiency | CPU s | largest process MiB | "
          "tree peak MiB | stragglers and causes vs truth |\n|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")


def _engines(args) -> list[str]:
    engines = ["local"]
    if args.cluster:
        if _cluster_available():
            engines += ["dask", "running"]
        else:
            print("skipping dask: this stepscope has no --cluster", file=sys.stderr)
    if args.hta:
        if _hta_available():
            engines.append("hta")
        else:
            print("skipping hta: Holistic Trace Analysis is not installed", file=sys.stderr)
    return engines


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except ValueError as e:  # a bad spec or source: one line
        print(f"error: {e}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--ranks", type=int, required=True)
    b.add_argument("--rank-mb", type=float, default=0.0, help="JSON per rank (default: the source's, 0.6 MB)")
    b.add_argument("--straggler", action="append", metavar="RANK:CAUSE:MS", help=f"CAUSE one of {CAUSES}")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--workers", type=int, default=1, help="ranks written at once")
    m = sub.add_parser("measure")
    m.add_argument("job", type=Path)
    s = sub.add_parser("sweep")
    s.add_argument("--ranks", default="8,64")
    s.add_argument("--rank-mb", type=float, default=0.0)
    s.add_argument("--scratch", type=Path, required=True)
    s.add_argument("--build-workers", type=int, default=1)
    s.add_argument("--keep", action="store_true")
    for q in (m, s):
        q.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
        q.add_argument("--cluster", action="store_true",
                       help="also with --cluster local:K, and against a cluster of K workers already running")
        q.add_argument("--hta", action="store_true", help="also Holistic Trace Analysis")
        q.add_argument("--repeat", type=int, default=1, help="runs per row; the fastest is reported")
        q.add_argument("--hta-max-ranks", type=int, default=64, help="HTA only on jobs of at most this many ranks")
    r = sub.add_parser("_run")  # the measured subprocess
    r.add_argument("engine", choices=ENGINES)
    r.add_argument("job", type=Path)
    r.add_argument("workers", type=int)
    r.add_argument("out", type=Path)
    r.add_argument("--address", help="the running cluster's scheduler (engine running)")
    args = p.parse_args(argv)
    if args.cmd == "_run":
        run_engine(args.engine, args.job, args.workers, args.out, args.address)
        return 0
    if args.cmd == "build":
        build(spec_for(args.ranks, args.rank_mb, args.straggler), args.out, args.workers)
        return 0
    workers = [int(w) for w in args.workers.split(",")]
    print(HEADER, flush=True)
    if args.cmd == "measure":
        measure(args.job, _engines(args), workers, args.repeat, args.hta_max_ranks)
        return 0
    args.scratch.mkdir(parents=True, exist_ok=True)
    for n in (int(x) for x in args.ranks.split(",")):
        job = build(spec_for(n, args.rank_mb, None), args.scratch / f"r{n}_{args.rank_mb:g}mb", args.build_workers)
        measure(job, _engines(args), workers, args.repeat, args.hta_max_ranks)
        if not args.keep:
            shutil.rmtree(job)
    return 0


if __name__ == "__main__":  # the measured subprocess (`_run`) starts here
    sys.exit(main())
