"""Prove the verdict: apply its remedy to the same training run, time both without the profiler, and compare.

    stepscope verify logs/<run>                  # = python scripts/verify.py logs/<run>
    stepscope verify logs/<run> --steps 400
    stepscope verify logs/<run> --memory         # the memory headroom instead (verify_headroom.py)

Reads the run's run.json (its resolved config and its diagnosis), picks the trainer option that removes the
verdict's cause (the cause's fixes in the verdict registry, analysis/verdicts.py, the first that
this config allows), then runs the same config twice in this invocation, unprofiled: as it was (the
baseline) and with the remedy, each as a TensorBoard run under RUN/verify/ so that the Scalars tab shows the
A/B. The prediction comes from the baseline's unprofiled figures: its measured step and phases (telemetry:
the wait for the batch, the copy, the dispatch, the CPU time) and the diagnosis's GPU time, through the
cause's rule in the registry (for a launch-bound step, the step once the dispatch is gone: at least its GPU
time). The rule gives the remedied step as a range, fastest to slowest, so the predicted speed-up is a
range too (low..high), and its middle is the point figure. The verdict is

- confirmed: the measured speed-up is at least MIN_SPEEDUP and reaches at least half of the gain at the
  range's low end;
- refuted: the step does not get faster (below MIN_SPEEDUP);
- inconclusive: faster, but by less than that.

Prints one line per run, the recorded section, and last the result alone on its line
(``confirmed: 2.20x measured, 1.70x..10.00x predicted (5.85x in the middle)``), and writes it into the run: `verification` in run.json, a section of
diagnosis.md, and TensorBoard text `verification` plus scalars `verify/<variant>_step_ms`.
Bad input (no run.json, a run another tool wrote, no diagnosis, a verdict whose cause no trainer option
removes): one line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from stepscope.analysis.verdicts import LOG_EVERY_FACTOR, REGISTRY, Cause, Unprofiled, by_name, primary_cause
from stepscope.cli.oneline import OneLineParser
from stepscope.demo.launch import INSTALLED_TRAIN, TrainFailed, run_train
from stepscope.report.front import analyze
from stepscope.tensorboard.tb_events import EventLog
from stepscope.trace.atomic import write_text_atomic
from stepscope.trace.errors import print_error

MIN_SPEEDUP = 1.05
HALF = 0.5  # the share of the gain at the predicted range's low end that a confirmed remedy must reach


class VerifyError(ValueError):
    """Bad input; the message is the one line printed."""


@dataclass(frozen=True)
class Remedy:
    flags: tuple[str, ...]  # replaces the same flags of the baseline
    why: str
    cause: Cause  # the verdict's cause that the flags remove (its prediction rule)


def _flag_args(cfg: dict) -> list[str]:
    """The train.py flags that reproduce a resolved config (unprofiled)."""
    m, d, o, r = cfg["model"], cfg["data"], cfg["optim"], cfg["run"]
    args = ["--arch", m["arch"], "--ops", m["ops"], "--data", d["name"], "--data-dir", str(d["data_dir"]),
            "--batch-size", str(d["batch_size"]), "--workers", str(d["workers"]),
            "--data-placement", d.get("placement", "device"),
            "--pin-memory" if d.get("pin_memory", True) else "--no-pin-memory",
            "--synthetic-train-size", str(d["synthetic_train_size"]),
            "--synthetic-eval-size", str(d["synthetic_eval_size"]), "--lr", str(o["lr"]), "--seed", str(cfg["seed"]),
            "--device", cfg["device"], "--bf16" if cfg["bf16"] else "--no-bf16",
            "--channels-last" if cfg["channels_last"] else "--no-channels-last", "--log-every", str(r["log_every"])]
    if d.get("augment", "basic") != "basic":
        args += ["--augment", d["augment"]]
    if cfg.get("cuda_graphs"):
        args.append("--cuda-graphs")
    if cfg.get("compile"):
        args += ["--compile", cfg["compile"]]
    if m.get("checkpoint"):
        args.append("--checkpoint-activations")
    return args


def remedy_for(verdict: str, cfg: dict, findings: list[dict]) -> Remedy:
    """The first fix of the verdict's primary cause (its costliest finding, as the diagnosis reports it)
    that this config allows."""
    try:
        record = by_name(verdict)
    except KeyError:
        raise VerifyError(f"{verdict}: not a verdict of stepscope") from None
    cause = primary_cause(record, {f["id"]: f.get("cost_ms_per_step", 0.0) for f in findings})
    if not cause.fixes:
        which = f" from {cause.finding}" if len(record.causes) > 1 else ""
        verifiable = ", ".join(f"{v.name} from {c.finding}" if len(v.causes) > 1 else v.name
                               for v in REGISTRY for c in v.causes if c.fixes)
        raise VerifyError(f"{verdict}{which}: no trainer option expresses its remedy (the trainer can verify "
                          f"{verifiable})")
    reasons = []
    for fix in cause.fixes:
        reason = _refusal(fix.flags, cfg)
        if reason is None:
            return Remedy(_filled(fix.flags, cfg), fix.why, cause)
        reasons.append(reason)
    raise VerifyError(f"{verdict}: {'; '.join(dict.fromkeys(reasons))}")


def _refusal(flags: tuple[str, ...], cfg: dict) -> str | None:
    """Why this config cannot take `flags` (a registry fix), or None."""
    d = cfg["data"]
    synthetic, placement = d["name"] == "synthetic", d.get("placement", "device")
    graphs, reduce_overhead = flags == ("--cuda-graphs",), flags == ("--compile", "reduce-overhead")
    if (graphs or reduce_overhead) and cfg["device"] != "cuda":
        return "on a CPU no trainer option removes launches"
    if (graphs or reduce_overhead) and cfg.get("cuda_graphs"):
        return "--cuda-graphs already on: no further trainer option"
    if graphs and not (synthetic and placement == "device" and not cfg.get("compile")):
        return "--cuda-graphs needs synthetic data on the device and no --compile"
    if reduce_overhead and cfg.get("compile") == "reduce-overhead":
        return "--compile reduce-overhead already on: no further trainer option"
    if flags[0] == "--workers" and d["name"] != "cifar10":
        return "synthetic data: no trainer option loads it faster"
    if flags == ("--pin-memory",) and d.get("pin_memory", True):
        return "pinned memory already on"
    if flags[0] == "--data-placement" and not (synthetic and placement == "host"):
        return "no synthetic data on the host to move to the device"
    return None


def _filled(flags: tuple[str, ...], cfg: dict) -> tuple[str, ...]:
    """A fix's flags with the run's values: more workers (at least 4, twice as many as before), logging
    LOG_EVERY_FACTOR times less often; pinned memory only where there is a device to copy to."""
    values = {"workers": str(max(4, 2 * cfg["data"]["workers"])),
              "log_every": str(LOG_EVERY_FACTOR * cfg["run"]["log_every"])}
    return tuple(f.format(**values) for f in flags if f != "--pin-memory" or cfg["device"] == "cuda")


def _with(args: list[str], flags: tuple[str, ...]) -> list[str]:
    """`args` with `flags` applied: a flag already there gets the new value; a --no-X/--X pair flips."""
    out = list(args)
    i = 0
    while i < len(flags):
        flag = flags[i]
        value = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
        name = flag.removeprefix("--no-").removeprefix("--")
        for j, a in enumerate(out):
            if a in (f"--{name}", f"--no-{name}"):
                if value is None:
                    out[j] = flag
                else:
                    out[j + 1] = value
                break
        else:
            out += [flag] + ([value] if value is not None else [])
        i += 2 if value is not None else 1
    if "--cuda-graphs" in flags:  # exclusive with compile
        out = [a for k, a in enumerate(out) if a != "--compile" and (k == 0 or out[k - 1] != "--compile")]
    return out


def load_run(run_dir: Path) -> dict:
    path = run_dir / "run.json"
    if not path.is_file():
        raise VerifyError(f"{run_dir}: no run.json (expected a run directory written by stepscope train)")
    try:
        run = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise VerifyError(f"{path}: unreadable ({type(e).__name__})") from None
    if not isinstance(run, dict) or "config" not in run or "step_kind" not in run:
        raise VerifyError(f"{path}: not a stepscope training run (no config); verify works on runs of "
                          "stepscope train --profile")
    if "diagnosis" not in run:
        raise VerifyError(f"{run_dir}: no diagnosis in run.json; run stepscope train with --profile first")
    if run.get("world_size", 1) > 1:
        raise VerifyError(f"{run_dir}: a {run['world_size']}-rank run; verify times single-process runs")
    return run


def timed_run(args: list[str], logdir: Path, name: str, train_cmd: tuple[str, ...]) -> tuple[float, dict | None]:
    """Median ms per timed step of an unprofiled run and its telemetry (its run.json), printing one line."""
    try:
        run = run_train([*args, "--logdir", str(logdir), "--run-name", name], train_cmd)
    except TrainFailed as e:
        raise VerifyError(f"the {name} run failed ({e}); flags: {shlex.join(args)}") from None
    ms = run["final"]["median_step_ms"]
    print(f"{name}: median {ms:.3f} ms/step   ({shlex.join(args)})", flush=True)
    return ms, run["final"].get("telemetry")


def diagnosis_span(run_dir: Path, summary: dict) -> dict:
    """The run's first span as the analysis reports it (with the unprofiled breakdown that the prediction
    needs; run.json keeps only a summary of it), from the run's traces and telemetry; the summary when the
    traces can no longer be analysed."""
    try:
        spans = analyze(run_dir).to_dict()["spans"]
    except (ValueError, OSError):
        return summary
    return next((s for s in spans if s.get("worker") == summary.get("worker")), spans[0])


def unprofiled_figures(telemetry: dict | None, span: dict, cores: float) -> Unprofiled:
    """The step the prediction starts from: a run's telemetry (the baseline's, else the profiled run's), with
    the GPU time of the diagnosis; without telemetry, the diagnosis's step alone."""
    if not telemetry or not telemetry.get("step_ms"):
        telemetry = {"step_ms": span["metrics"]["step_ms"]}
    return Unprofiled.of_run(telemetry, span, cores)


def prediction(cause: Cause, u: Unprofiled, base_ms: float) -> dict:
    """The remedied step by the cause's rule (fastest..slowest ms, never slower than the step was) and the
    speed-up over `base_ms` it implies: a range, low..high, and its middle (the middle of the step range)."""
    fast, slow = cause.predict(u) if cause.predict else (u.step_ms, u.step_ms)
    slow = max(min(slow, u.step_ms), 1e-9)
    fast = max(min(fast, slow), 1e-9)
    return {"step_ms": [fast, slow], "speedup": [base_ms / slow, base_ms / fast],
            "point": base_ms / ((fast + slow) / 2)}


# One process's share of a parallel measurement: sleep until the common start time, then time a fixed amount of
# pure-Python work (single-threaded, no allocation), and print the seconds it took.
_SPIN = ("import sys, time\n"
         "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
         "t0 = time.perf_counter()\n"
         "x = 0\n"
         "for i in range(int(sys.argv[2])):\n"
         "    x += i * i\n"
         "print(time.perf_counter() - t0)\n")
SPIN_WORK = 2_000_000  # about 0.1 s of one core
MAX_SPINNERS = 16


def _spin(n: int, work: int = SPIN_WORK) -> list[float]:
    start = time.time() + 0.2 + 0.02 * n  # every process is up before the common start
    procs = [subprocess.Popen([sys.executable, "-I", "-c", _SPIN, repr(start), str(work)], stdout=subprocess.PIPE,
                              text=True) for _ in range(n)]
    return [float(p.communicate()[0]) for p in procs]


def parallel_cores(cores: int) -> float:
    """The cores' worth of parallel CPU throughput this process's CPUs deliver now, measured: `cores`
    single-threaded processes do the same work at once, each against one alone. Logical CPUs are not cores:
    two hyper-threads of one core, or a virtual machine's vCPUs on a shared host, give less than twice one.
    Between 1 and `cores`; more than MAX_SPINNERS CPUs are measured on MAX_SPINNERS and scaled."""
    if cores <= 1:
        return float(max(cores, 1))
    alone = min(_spin(1)[0] for _ in range(2))
    n = min(cores, MAX_SPINNERS)
    delivered = sum(min(alone / t, 1.0) for t in _spin(n)) * cores / n
    return max(1.0, min(float(cores), delivered))


def verify(run_dir: Path, steps: int, train_cmd: tuple[str, ...] = INSTALLED_TRAIN) -> dict:
    run = load_run(run_dir)
    cfg = run["config"]
    diag = run["diagnosis"]
    verdict = diag["verdict"]
    span = diag["spans"][0]
    remedy = remedy_for(verdict, cfg, span.get("findings", []))
    span = diagnosis_span(run_dir, span)
    base = _flag_args(cfg) + ["--steps", str(steps)]
    fixed = _with(base, remedy.flags)
    out_dir = run_dir / "verify"
    if out_dir.exists():
        raise VerifyError(f"{out_dir} exists: this run was verified already (remove it to verify again)")
    base_ms, base_telemetry = timed_run(base, out_dir, "baseline", train_cmd)
    fixed_ms, _ = timed_run(fixed, out_dir, "remedy", train_cmd)
    measured = base_ms / fixed_ms
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    parallel = parallel_cores(cores)
    u = unprofiled_figures(base_telemetry or (run.get("final") or {}).get("telemetry"), span, parallel)
    p = prediction(remedy.cause, u, base_ms)
    low, high = p["speedup"]
    if measured < MIN_SPEEDUP:
        result = "refuted"
    elif measured - 1 >= HALF * (low - 1):
        result = "confirmed"
    else:
        result = "inconclusive"
    return {"verdict": verdict, "cause": remedy.cause.finding, "remedy": list(remedy.flags), "why": remedy.why,
            "result": result, "baseline_step_ms": base_ms, "remedy_step_ms": fixed_ms,
            "measured_speedup": measured, "predicted_speedup": p["point"], "predicted_speedup_range": [low, high],
            "predicted_step_ms_range": p["step_ms"], "unprofiled": asdict(u), "cpu_ms_per_step": u.cpu_ms,
            "cores": cores, "parallel_cores": parallel, "steps": steps, "min_speedup": MIN_SPEEDUP,
            "share_of_predicted_gain_required": HALF}


def _rule(v: dict) -> str:
    """The rule behind the prediction, in words: the first sentence of the rule's docstring, lower-cased."""
    cause = by_name(v["verdict"]).cause(v.get("cause", ""))
    doc = " ".join(((cause.predict.__doc__ or "") if cause is not None and cause.predict else "").split())
    first = doc.split(". ")[0].rstrip(".")
    return first[:1].lower() + first[1:]


def record(run_dir: Path, v: dict) -> str:
    """Write the result into run.json, diagnosis.md and TensorBoard; returns the Markdown section."""
    low, high = v["predicted_speedup_range"]
    fast, slow = v["predicted_step_ms_range"]
    md = (f"## Verification: `{v['result']}`\n\n{v['verdict']}: the remedy `{' '.join(v['remedy'])}` ({v['why']}) "
          f"took the unprofiled step from {v['baseline_step_ms']:.3f} to {v['remedy_step_ms']:.3f} ms: "
          f"{v['measured_speedup']:.2f}x measured, {low:.2f}x..{high:.2f}x predicted ({v['predicted_speedup']:.2f}x "
          f"in the middle; a step of {fast:.3f}..{slow:.3f} ms, from the baseline's unprofiled figures: "
          f"{_rule(v)}; confirmed from {MIN_SPEEDUP:.2f}x and half the gain at the range's low end).\n")
    run = json.loads((run_dir / "run.json").read_text())
    run["verification"] = v
    write_text_atomic(run_dir / "run.json", json.dumps(run, indent=2, allow_nan=False) + "\n")
    diag = run_dir / "diagnosis.md"
    write_text_atomic(diag, (diag.read_text() if diag.is_file() else "") + "\n" + md)
    with EventLog(run_dir) as tb:
        tb.text("verification", md, 0)
        tb.scalars({"verify/baseline_step_ms": v["baseline_step_ms"], "verify/remedy_step_ms": v["remedy_step_ms"],
                    "verify/measured_speedup": v["measured_speedup"], "verify/predicted_speedup": v["predicted_speedup"],
                    "verify/predicted_speedup_low": low, "verify/predicted_speedup_high": high}, 0)
    return md


def outcome(v: dict) -> str:
    """The last line verify prints: the result first, then the measured and the predicted speed-ups."""
    low, high = v["predicted_speedup_range"]
    return (f"{v['result']}: {v['measured_speedup']:.2f}x measured, {low:.2f}x..{high:.2f}x predicted "
            f"({v['predicted_speedup']:.2f}x in the middle)")


def main(argv: list[str] | None = None, prog: str = "stepscope verify",
         train_cmd: tuple[str, ...] = INSTALLED_TRAIN) -> int:
    p = OneLineParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a profiled run of stepscope train")
    p.add_argument("--steps", type=int, default=300, help="steps per timed run (default 300)")
    p.add_argument("--memory", action="store_true",
                   help="verify the memory headroom instead: re-run at the predicted largest batch, and with "
                        "expandable segments (docs/memory.md)")
    a = p.parse_args(argv)
    if a.steps < 30:
        p.error(f"--steps {a.steps} is too few for a stable median; use 30 or more")
    if a.memory:
        return _memory(a.run_dir, a.steps, prog, train_cmd)
    try:
        v = verify(a.run_dir, a.steps, train_cmd)
    except VerifyError as e:
        print_error(f"{prog}: error: {e}")
        return 2
    print(record(a.run_dir, v).strip().splitlines()[-1])
    print(outcome(v))
    return 0 if v["result"] != "refuted" else 1


def _memory(run_dir: Path, steps: int, prog: str, train_cmd: tuple[str, ...]) -> int:
    """``--memory``: verify_headroom.py's three runs; exit 0 when the prediction is confirmed, 1 when refuted."""
    from stepscope.demo.verify_headroom import HeadroomError, verify_headroom
    from stepscope.demo.verify_headroom import record as record_headroom
    try:
        run = load_run(run_dir)
        cfg = run["config"]
        v = verify_headroom(run_dir, steps, _flag_args(cfg), int(cfg["data"]["batch_size"]), cfg["device"], train_cmd,
                            cfg["model"]["arch"])
    except (VerifyError, HeadroomError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    print(record_headroom(run_dir, v).strip())
    return 0 if v["result"] == "confirmed" else 1


if __name__ == "__main__":
    sys.exit(main())
