"""Time and peak memory of the trace analysis and export on large traces built from a real one.

    python scripts/bench_analysis.py build --size 100M --out /tmp/bench/r100     # a 100 MB run directory
    python scripts/bench_analysis.py measure /tmp/bench/r100 --repeat 2          # one table row per command
    python scripts/bench_analysis.py parsers /tmp/bench/r100                     # JSON libraries on it

``build`` replicates the events of a real trace (default ``tests/data/eager_bs128``, a ResNet-18 run on an
H200) until the file reaches ``--size`` bytes: each copy gets fresh correlation, flow, External and Python
ids, renumbered ``ProfilerStep#N`` and timestamps shifted past the previous copy, and is written with
json's default separators, one event per line (``--gz`` compresses it). It then checks that the built
trace gives the source's per-step metrics (within ``TOLERANCE``) and prints
``built PATH (N bytes, K copies); per-step metrics match``.

``measure`` runs each command in its own subprocess and samples the peak RSS of its processes:
``json.load`` of the same file (the baseline), ``analyze.py --json``, ``analyze.py --export-tensorboard``;
it prints a Markdown table with the median wall and CPU time (the process and its children), the peak RSS
of the largest process and the sum of the peaks of all processes of the tree (VmHWM, sampled every 20 ms:
parallel parsers add up), each run's wall time and the 1-minute load average when the row started.
``parsers`` does the same for decoding the file's events with the candidate JSON libraries.

    python scripts/bench_analysis.py readers /tmp/bench/r1g --repeat 3    # the compiled reader vs msgspec

``readers`` times ``stepscope analyze --json``, the export, and the tab's first analysis of a run it has not
seen (tensorboard/tab/analyse.py, the local worker policy) through the compiled trace reader and, as the same-run
baseline, through msgspec alone (``STEPSCOPE_PURE_PYTHON=1``), plus the tab's analysis in one process
inline (what the tab did before it used the worker policy); and checks that both readers print the same
``--json`` report.

    python scripts/bench_analysis.py checkouts /tmp/before /tmp/bench/r1g --repeat 3   # against another commit

``checkouts`` times ``analyze RUN --json`` of another checkout (a worktree with its compiled reader built in
place; run through its own scripts/analyze.py, as same_reports.py does) and of this one, alternating run by
run, after compiling both to bytecode and checking that both print the same report; it prints each run and
the median CPU-s ratio of the pairs.

    python scripts/bench_analysis.py targets /tmp/base359 /tmp/bench/r1g --gz /tmp/bench/r1g_gz --repeat 3

``targets`` measures the fast reader's targets (``TARGETS``: ``--json`` of the plain and the gzipped run, and
``--json --export-tensorboard`` of the plain one) for another checkout (the same-run baseline) and this one,
alternating run by run, each checkout compiled to bytecode first (``_bytecode``). Before each run, and
outside its time, the export of the run before is removed and written back (``_settled``): a run that starts
while the kernel still writes back the gigabyte of the export before it shares the cores with that. Each
run is timed as ``/usr/bin/time`` does (``wait4``: wall, CPU and peak RSS of the command and the processes it
waited for), without sampling anything while it runs. It prints each run, then one row per command: the
medians, the median of the pairs' ratios, the target, and the target as a ratio to the baseline's time on
the day it was set (a machine that runs slower slows both).

    python scripts/bench_analysis.py plugin /tmp/bench/x/out     # an exported run: time until it shows

``plugin`` starts TensorBoard with torch-tb-profiler on the exported run's parent folder and prints the
seconds until the plugin's Overview of the run answers, and the peak RSS of TensorBoard's processes.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace

from bench import REPO
from bench.memory import measure_command, timed, tree_peaks

TOLERANCE = 0.02  # relative; only the first step of each copy may see a different previous step
COMPARED = ("step_ms", "host_step_ms", "gpu_busy_pct", "kernels_per_step", "syncs_per_step",
            "memcpy_per_step", "data_ms_per_step")
ID_ARGS = ("External id", "Python id", "Python parent id")


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def _copy_events(events: list[dict], k: int, shift: float, step_span: int, offsets: dict) -> list[dict]:
    out = []
    for e in events:
        if k and e.get("ph") == "M":
            continue  # process/thread names: once per file
        e = copy.copy(e)
        if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
            e["ts"] = e["ts"] + k * shift
        if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
            e["id"] += k * offsets["flow"]
        name = e.get("name")
        if isinstance(name, str) and "ProfilerStep#" in name:
            head, num = name.rsplit("#", 1)
            e["name"] = f"{head}#{int(num) + k * step_span}"
        args = e.get("args")
        if isinstance(args, dict):
            args = e["args"] = dict(args)
            if isinstance(args.get("correlation"), int):
                args["correlation"] += k * offsets["flow"]
            for key in ID_ARGS:
                if isinstance(args.get(key), int):
                    args[key] += k * offsets[key]
        out.append(e)
    return out


def build(source: Path, size: int, out: Path, gz: bool) -> Path:
    (tf,) = discover(source).traces[:1]
    trace = load_trace(tf.path)
    events = [e for e in trace["traceEvents"] if isinstance(e, dict)]
    with_time = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    lo = min(e["ts"] for e in with_time)
    hi = max(e["ts"] + float(e.get("dur", 0) or 0) for e in with_time)
    shift = float(int(hi - lo) + 10_000)  # whole µs: shifted times stay exact
    numbers = [int(e["name"].rsplit("#", 1)[1]) for e in events
               if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
    step_span = max(numbers) - min(numbers) + 1

    def biggest(get) -> int:
        return max([v for v in map(get, events) if isinstance(v, int)] + [0]) + 1

    offsets = {"flow": max(biggest(lambda e: e.get("id") if e.get("ph") in ("s", "f", "t") else None),
                           biggest(lambda e: (e.get("args") or {}).get("correlation")))}
    for key in ID_ARGS:
        offsets[key] = biggest(lambda e, key=key: (e.get("args") or {}).get(key))
    head = {k: v for k, v in trace.items() if k not in ("traceEvents", "traceName")}
    out.mkdir(parents=True, exist_ok=True)
    path = out / (f"{tf.worker}.{tf.span or '1'}.pt.trace.json" + (".gz" if gz else ""))
    opener = gzip.open(path, "wb", compresslevel=1) if gz else open(path, "wb")
    written = 0
    k = 0
    with opener as f:
        f.write(json.dumps(head)[:-1].encode() + b', "traceEvents": [\n')
        while True:
            text = ",\n".join(json.dumps(e) for e in _copy_events(events, k, shift, step_span, offsets))
            f.write((",\n" if k else "").encode() + text.encode())
            written += len(text) + 2
            k += 1
            if written >= size:
                break
        f.write(b'\n], "traceName": ' + json.dumps(str(path)).encode() + b"}\n")
    _check_metrics(source, out)
    print(f"built {path} ({path.stat().st_size} bytes, {k} copies); per-step metrics match")
    return path


def _check_metrics(source: Path, built: Path) -> None:
    from stepscope.report.front import analyze

    want = analyze(source).spans[0].metrics.to_dict()
    got = analyze(built).spans[0].metrics.to_dict()
    for key in COMPARED:
        a, b = want[key], got[key]
        if a is None and b is None:
            continue
        if a is None or b is None or abs(a - b) > TOLERANCE * max(abs(a), 1e-9):
            raise SystemExit(f"error: built trace's {key} is {b}, the source's {a}")


def _bytecode(*checkouts: Path) -> None:
    """Each checkout's modules compiled to bytecode before anything is timed (by every command here that
    times stepscope), as an installed package has them: where the environment sets PYTHONDONTWRITEBYTECODE
    (as the 2-core VM does), a checkout whose sources changed would otherwise compile them again in every
    timed run (0.03-0.08 s of each)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for root in checkouts:
        subprocess.run([sys.executable, "-m", "compileall", "-q", "trainer", "scripts"], cwd=root, env=env,
                       check=True, stdout=subprocess.DEVNULL)


def _settled(scratch: Path | None = None) -> None:
    """Before a timed run: what earlier runs wrote is removed and on disk (a run that starts while the kernel
    still writes back gigabytes of an earlier export shares the 2 cores with it)."""
    if scratch is not None:
        for p in scratch.iterdir():
            shutil.rmtree(p, ignore_errors=True)
    os.sync()


def _table(rows: list[tuple[str, list[str]]], repeat: int, scratch: Path | None = None) -> None:
    print("| command | wall s (median) | CPU s (median) | peak RSS MiB, largest process | peak RSS MiB, "
          "process tree (sum) | peak memory MiB, process tree (PSS) | wall s of each run | "
          "load avg (1 min) at start |")
    print("|---|---|---|---|---|---|---|---|")
    for label, cmd in rows:
        load = os.getloadavg()[0]
        runs = []
        for _ in range(repeat):
            _settled(scratch)
            runs.append(measure_command(cmd))
        walls = [r[0] for r in runs]
        print(f"| {label} | {statistics.median(walls):.2f} | {statistics.median(r[1] for r in runs):.2f} | "
              f"{max(r[2] for r in runs):.0f} | {max(r[3] for r in runs):.0f} | {max(r[4] for r in runs):.0f} | "
              f"{', '.join(f'{w:.2f}' for w in walls)} | {load:.1f} |", flush=True)


def measure(run: Path, repeat: int, export: bool) -> None:
    _bytecode(REPO)
    (tf,) = discover(run).traces[:1]
    py = sys.executable
    opener = "gzip.open" if tf.path.name.endswith(".gz") else "open"
    rows = [("json.load (baseline)", [py, "-c", f"import gzip, json; json.load({opener}({str(tf.path)!r}, 'rb'))"]),
            ("analyze.py --json", [py, str(REPO / "scripts" / "analyze.py"), str(run), "--json"])]
    scratch = Path(tempfile.mkdtemp(prefix="bench-export-"))
    if export:
        rows.append(("analyze.py --export-tensorboard", [
            py, "-c", "import shutil, subprocess, sys, tempfile; d = tempfile.mkdtemp(dir=sys.argv[3]); "
            "sys.exit(subprocess.call([sys.executable, sys.argv[1], sys.argv[2], '--export-tensorboard', "
            "d + '/out'], stdout=subprocess.DEVNULL))",
            str(REPO / "scripts" / "analyze.py"), str(run), str(scratch)]))
    try:
        print(f"{tf.path} ({tf.path.stat().st_size / 1e6:.0f} MB), {os.cpu_count()} CPUs")
        _table(rows, repeat, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


PARSERS = {
    "json.load": "import json; json.load(open(P, 'rb'))",
    "json.load, GC off": "import gc, json; gc.disable(); json.load(open(P, 'rb'))",
    "orjson.loads": "import orjson; orjson.loads(open(P, 'rb').read())",
    "msgspec (untyped)": "import msgspec; msgspec.json.decode(open(P, 'rb').read())",
    "simdjson": "import simdjson; simdjson.Parser().parse(open(P, 'rb').read()).as_dict()",
    "ijson (yajl2_c) events": "import ijson; sum(1 for _ in ijson.items(open(P, 'rb'), 'traceEvents.item', "
                              "use_float=True))",
    "stepscope streaming parse": "from stepscope.analysis.stream_parse import parse_trace_file as f; f(P, 'w', '1')",
}


def parsers(run: Path, repeat: int) -> None:
    (tf,) = discover(run).traces[:1]
    if tf.path.name.endswith(".gz"):
        raise SystemExit("error: give an uncompressed trace to compare parsers")
    print(f"{tf.path} ({tf.path.stat().st_size / 1e6:.0f} MB)")
    rows = [(name, [sys.executable, "-c", f"P = {str(tf.path)!r}; {code}"]) for name, code in PARSERS.items()]
    _table(rows, repeat)


def plugin(exported: Path, timeout_s: float) -> None:
    """Start TensorBoard on the folder holding ``exported`` and time until the plugin's Overview of it
    answers (trainer/tensorboard/tbserver.py starts it on a free loopback port)."""
    from stepscope.tensorboard.tbserver import TensorBoard

    t0 = time.perf_counter()
    peaks: dict[int, int] = {}
    with TensorBoard(exported.parent) as tb:
        started = time.perf_counter() - t0
        while True:
            tree_peaks(tb.proc.pid, peaks)
            try:
                runs = tb.profiler("runs")
                if exported.name in runs["runs"] and not runs["loading"]:
                    worker, span = tb.first_worker_span(exported.name)
                    tb.profiler("overview", run=exported.name, worker=worker, span=span)
                    break
            except OSError:
                pass
            if time.perf_counter() - t0 > timeout_s:
                raise SystemExit(f"error: the plugin did not show {exported.name} within {timeout_s:.0f} s")
            time.sleep(0.5)
    print(f"plugin Overview of {exported} answered {time.perf_counter() - t0:.1f} s after TensorBoard was "
          f"launched (TensorBoard itself up after {started:.1f} s); peak RSS of TensorBoard and its "
          f"loader processes {sum(peaks.values()) / 1024:.0f} MiB (sum of each one's peak)")


def readers(run: Path, repeat: int, export: bool) -> None:
    _bytecode(REPO)
    py = sys.executable
    analyze = [str(REPO / "scripts" / "analyze.py"), str(run), "--json"]
    pure = ["env", "STEPSCOPE_PURE_PYTHON=1"]
    outs = [subprocess.run(prefix + [py, *analyze], capture_output=True, text=True, check=True).stdout
            for prefix in ([], pure)]
    print(f"reports through both readers identical: {outs[0] == outs[1]}")
    traces = json.dumps([{"path": str(t.path), "kind": t.kind, "worker": t.worker, "span": t.span, "run": t.run}
                         for t in discover(run).traces])
    tab = ("import sys; from pathlib import Path; from stepscope.report.front import analyze; "
           "from stepscope.report.measure import measured; "
           "from stepscope.trace.discover import Found; from stepscope.trace.workers import Workers; "
           f"t = [Found(Path(d['path']), d['kind'], d['worker'], d['span'], d['run']) for d in {traces}]; "
           "measured(analyze(Path(sys.argv[1]), traces=t, tables=True, "
           "workers=Workers.inline() if sys.argv[2] == 'inline' else Workers.local()), Path(sys.argv[1]))")
    rows = [("analyze --json, compiled reader", [py, *analyze]),
            ("analyze --json, msgspec (STEPSCOPE_PURE_PYTHON=1)", [*pure, py, *analyze]),
            ("tab's first analysis, compiled reader, local workers", [py, "-c", tab, str(run), "local"]),
            ("tab's first analysis, msgspec, local workers", [*pure, py, "-c", tab, str(run), "local"]),
            ("tab's first analysis, msgspec, inline (before)", [*pure, py, "-c", tab, str(run), "inline"])]
    scratch = Path(tempfile.mkdtemp(prefix="bench-export-"))
    if export:
        exp = [py, "-c", "import subprocess, sys, tempfile; d = tempfile.mkdtemp(dir=sys.argv[3]); "
               "sys.exit(subprocess.call([sys.executable, sys.argv[1], sys.argv[2], '--export-tensorboard', "
               "d + '/out'], stdout=subprocess.DEVNULL))", str(REPO / "scripts" / "analyze.py"), str(run), str(scratch)]
        rows += [("--export-tensorboard, compiled reader", exp), ("--export-tensorboard, msgspec", [*pure, *exp])]
    try:
        (tf,) = discover(run).traces[:1]
        print(f"{tf.path} ({tf.path.stat().st_size / 1e6:.0f} MB), {os.cpu_count()} CPUs")
        _table(rows, repeat, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def checkouts(base: Path, run: Path, repeat: int) -> None:
    """``analyze RUN --json`` of another checkout (``base``, through its own scripts/analyze.py and trainer/
    folder, as same_reports.py runs it) and of this one, alternating run by run; checks the two print the
    same report first."""
    from bench.same_reports import own_package

    site = Path(tempfile.mkdtemp(prefix="bench-base-"))
    try:
        base_path = own_package(base, site)["PYTHONPATH"]
        cmds = {"base": ["env", f"PYTHONPATH={base_path}", sys.executable, str(base / "scripts" / "analyze.py"),
                         str(run), "--json"],
                "this": [sys.executable, str(REPO / "scripts" / "analyze.py"), str(run), "--json"]}
        _bytecode(base, REPO)
        outs = {k: subprocess.run(c, capture_output=True, text=True, check=True).stdout for k, c in cmds.items()}
        print(f"{run}: reports identical: {outs['base'] == outs['this']}; {os.cpu_count()} CPUs")
        runs: dict[str, list] = {"base": [], "this": []}
        print("| run | checkout | wall s | CPU s | peak RSS MiB, largest process | peak memory MiB, tree (PSS) | "
              "load avg (1 min) at start |")
        print("|---|---|---|---|---|---|---|")
        for i in range(repeat):
            for k in ("base", "this"):
                load = os.getloadavg()[0]
                _settled()
                r = measure_command(cmds[k])
                runs[k].append(r)
                print(f"| {i + 1} | {k} | {r[0]:.2f} | {r[1]:.2f} | {r[2]:.0f} | {r[4]:.0f} | {load:.1f} |", flush=True)
        for k, rs in runs.items():
            print(f"{k}: median wall {statistics.median(r[0] for r in rs):.2f} s, CPU {statistics.median(r[1] for r in rs):.2f} s, "
                  f"peak RSS {max(r[2] for r in rs):.0f} MiB, PSS {max(r[4] for r in rs):.0f} MiB")
        ratio = [b[1] / t[1] for b, t in zip(runs["base"], runs["this"], strict=True)]
        print(f"CPU s base/this per pair: {', '.join(f'{x:.2f}' for x in ratio)}; median {statistics.median(ratio):.2f}")
    finally:
        shutil.rmtree(site, ignore_errors=True)


# The fast reader's targets on the 2-core machine, each with the baseline checkout's (359a7e0's) median time on
# the day the target was set: the target divided by it is the ratio that the target asks for on a day the
# machine runs at another speed.
TARGETS = {"--json": (2.0, 7.06), "--json of .json.gz": (2.5, 8.52), "--json --export-tensorboard": (6.0, 20.04)}


def _spread(xs: list[float], digits: int = 2) -> str:
    return f"{statistics.median(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def targets(base: Path, run: Path, gz_run: Path | None, repeat: int) -> list[tuple[str, float, float, float]]:
    """The module docstring's ``targets``; returns (command, this checkout's median wall s, the baseline's, the
    median of the pairs' ratios) for each command measured."""
    from bench.same_reports import own_package

    site = Path(tempfile.mkdtemp(prefix="bench-base-"))
    scratch = Path(tempfile.mkdtemp(prefix="bench-export-"))
    try:
        envs = {"base": own_package(base, site), "this": None}
        roots = {"base": base, "this": REPO}
        commands = [("--json", [str(run), "--json"])]
        if gz_run is not None:
            commands.append(("--json of .json.gz", [str(gz_run), "--json"]))
        commands.append(("--json --export-tensorboard", [str(run), "--json", "--export-tensorboard"]))
        _bytecode(base, REPO)
        print(f"{run}, {os.cpu_count()} CPUs; base {base}, this {REPO}; both compiled to bytecode first")
        print("| command | round | checkout | wall s | CPU s | peak RSS MiB | load avg (1 min) at start |")
        print("|---|---|---|---|---|---|---|")
        runs: dict[str, dict[str, list]] = {}
        for label, args in commands:
            runs[label] = {"base": [], "this": []}
            for i in range(repeat):
                for k in ("base", "this"):
                    _settled(scratch)
                    out = [str(scratch / k)] if "--export-tensorboard" in args else []
                    load = os.getloadavg()[0]
                    r = timed([sys.executable, str(roots[k] / "scripts" / "analyze.py"), *args, *out], envs[k])
                    runs[label][k].append(r)
                    print(f"| {label} | {i + 1} | {k} | {r[0]:.2f} | {r[1]:.2f} | {r[2]:.0f} | {load:.1f} |", flush=True)
        _settled(scratch)
        print()
        print("| command | this checkout, wall s | base, wall s | ratio (median of pairs) | CPU ratio | target s "
              "| target as a ratio | peak RSS MiB, this / base |")
        print("|---|---|---|---|---|---|---|---|")
        rows = []
        for label, got in runs.items():
            this, base_runs = got["this"], got["base"]
            ratios = [t[0] / b[0] for t, b in zip(this, base_runs, strict=True)]
            cpu = statistics.median(t[1] / b[1] for t, b in zip(this, base_runs, strict=True))
            target, base_then = TARGETS[label]
            print(f"| {label} | {_spread([r[0] for r in this])} | {_spread([r[0] for r in base_runs])} | "
                  f"{_spread(ratios, 3)} | {cpu:.3f} | {target:.1f} | {target / base_then:.3f} | "
                  f"{max(r[2] for r in this):.0f} / {max(r[2] for r in base_runs):.0f} |")
            rows.append((label, statistics.median(r[0] for r in this), statistics.median(r[0] for r in base_runs),
                         statistics.median(ratios)))
        return rows
    finally:
        shutil.rmtree(site, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_analysis.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--source", type=Path, default=REPO / "tests" / "data" / "eager_bs128")
    b.add_argument("--size", type=_size, required=True, help="bytes of JSON, e.g. 100M, 1G")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--gz", action="store_true")
    m = sub.add_parser("measure")
    m.add_argument("run", type=Path)
    m.add_argument("--repeat", type=int, default=2)
    m.add_argument("--no-export", action="store_true")
    q = sub.add_parser("parsers")
    q.add_argument("run", type=Path)
    q.add_argument("--repeat", type=int, default=1)
    r = sub.add_parser("readers")
    r.add_argument("run", type=Path)
    r.add_argument("--repeat", type=int, default=3)
    r.add_argument("--no-export", action="store_true")
    c = sub.add_parser("checkouts")
    c.add_argument("base", type=Path, help="another checkout (a git worktree), its compiled reader built in place")
    c.add_argument("run", type=Path)
    c.add_argument("--repeat", type=int, default=3)
    g = sub.add_parser("targets")
    g.add_argument("base", type=Path, help="the baseline checkout (a git worktree), its compiled reader built in place")
    g.add_argument("run", type=Path, help="a run folder holding the large plain trace")
    g.add_argument("--gz", type=Path, help="the same run stored gzipped")
    g.add_argument("--repeat", type=int, default=3)
    t = sub.add_parser("plugin")
    t.add_argument("exported", type=Path, help="an OUT_DIR of analyze.py --export-tensorboard")
    t.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args(argv)
    if a.cmd == "build":
        build(a.source, a.size, a.out, a.gz)
    elif a.cmd == "measure":
        measure(a.run, a.repeat, not a.no_export)
    elif a.cmd == "readers":
        readers(a.run, a.repeat, not a.no_export)
    elif a.cmd == "checkouts":
        checkouts(a.base.resolve(), a.run, a.repeat)
    elif a.cmd == "targets":
        targets(a.base.resolve(), a.run, a.gz, a.repeat)
    elif a.cmd == "plugin":
        plugin(a.exported, a.timeout)
    else:
        parsers(a.run, a.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
