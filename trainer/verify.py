"""Prove the verdict: apply its remedy to the same training run, time both without the profiler, and compare.

    stepscope verify logs/<run>                  # = python scripts/verify.py logs/<run>
    stepscope verify logs/<run> --steps 400

Reads the run's run.json (its resolved config and its diagnosis), picks the trainer option that removes the
verdict's cause (REMEDIES below), then runs the same config twice in this invocation, unprofiled: as it was
(the baseline) and with the remedy, each as a TensorBoard run under RUN/verify/ so that the Scalars tab shows
the A/B. The verdict is

- confirmed: the remedy's speed-up reaches at least half of what the verdict's cost predicts
  (predicted = step / (step - cost of the verdict's finding)) and at least MIN_SPEEDUP. For data_bound the
  loading moves to worker processes but still needs cores: the step cannot drop below the run's CPU time per
  step (its telemetry `cpu_ms`) spread over this machine's cores, so predicted = step / max(step - cost,
  cpu_ms / cores);
- refuted: the step does not get faster (below MIN_SPEEDUP);
- inconclusive: faster, but by less than half the predicted gain.

Prints one line per run and the result, and writes it into the run: `verification` in run.json, a section of
diagnosis.md, and TensorBoard text `verification` plus scalars `verify/<variant>_step_ms`.
Bad input (no run.json, a run another tool wrote, no diagnosis, a verdict with no trainer option for its
remedy): one line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from .launch import INSTALLED_TRAIN, TrainFailed, run_train
from .profiler.cli.oneline import OneLineParser
from .profiler.serve.tb_events import EventLog
from .profiler.trace.atomic import write_text_atomic

MIN_SPEEDUP = 1.05
HALF = 0.5  # the share of the predicted gain a confirmed remedy must reach


class VerifyError(ValueError):
    """Bad input; the message is the one line printed."""


@dataclass(frozen=True)
class Remedy:
    flags: tuple[str, ...]  # replaces the same flags of the baseline
    why: str


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
    return args


def remedy_for(verdict: str, cfg: dict, findings: list[dict]) -> Remedy:
    d = cfg["data"]
    on_gpu = cfg["device"] == "cuda"
    if verdict == "launch_bound":
        if not on_gpu:
            raise VerifyError("launch_bound on a CPU: no trainer option removes launches there")
        if cfg.get("cuda_graphs"):
            raise VerifyError("launch_bound with --cuda-graphs already on: no further trainer option")
        if d["name"] == "synthetic" and d.get("placement", "device") == "device" and not cfg.get("compile"):
            return Remedy(("--cuda-graphs",), "replay the whole step as one CUDA graph")
        if cfg.get("compile") == "reduce-overhead":
            raise VerifyError("launch_bound with --compile reduce-overhead already on: no further trainer option")
        return Remedy(("--compile", "reduce-overhead"), "torch.compile with CUDA graphs (reduce-overhead)")
    if verdict == "data_bound":
        if d["name"] != "cifar10":
            raise VerifyError("data_bound on synthetic data: no trainer option loads it faster")
        return Remedy(("--workers", str(max(4, 2 * d["workers"]))) + (("--pin-memory",) if on_gpu else ()),
                      "DataLoader workers load batches in the background")
    if verdict == "transfer_bound":
        if not d.get("pin_memory", True):
            return Remedy(("--pin-memory",), "copy from pinned memory with non_blocking=True")
        if d["name"] == "synthetic" and d.get("placement") == "host":
            return Remedy(("--data-placement", "device"), "keep the data on the GPU")
        raise VerifyError("transfer_bound with pinned memory already on: no further trainer option")
    if verdict == "host_bound":
        if any(f["id"] == "host_sync" for f in findings):
            return Remedy(("--log-every", str(10 * cfg["run"]["log_every"])),
                          "sync at the logging cadence ten times less often")
        raise VerifyError("host_bound from host work outside torch ops: no trainer option removes it")
    raise VerifyError(f"{verdict}: no trainer option expresses its remedy (the trainer can verify launch_bound, "
                      "data_bound, transfer_bound and host_bound from logging syncs)")


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


def timed_run(args: list[str], logdir: Path, name: str, train_cmd: tuple[str, ...]) -> float:
    """Median ms per timed step of an unprofiled run (its run.json), printing one line."""
    try:
        run = run_train([*args, "--logdir", str(logdir), "--run-name", name], train_cmd)
    except TrainFailed as e:
        raise VerifyError(f"the {name} run failed ({e}); flags: {shlex.join(args)}") from None
    ms = run["final"]["median_step_ms"]
    print(f"{name}: median {ms:.3f} ms/step   ({shlex.join(args)})", flush=True)
    return ms


def predicted_speedup(diag_span: dict, verdict: str, step_ms: float, cpu_ms: float | None = None,
                      cores: int = 1) -> float:
    """The speed-up that removing the verdict's cost would give. With `cpu_ms` (the training process's CPU time
    per step), a data_bound step is bounded below by that work spread over `cores`: worker processes move
    the loading off the training process, not off the machine."""
    primary = {"launch_bound": "launch_overhead", "data_bound": "data_loading", "transfer_bound": "transfer",
               "host_bound": "host_sync"}[verdict]
    cost = next((f["cost_ms_per_step"] for f in diag_span.get("findings", []) if f["id"] == primary), 0.0)
    if not cost:
        return 1.0
    floor = step_ms - cost
    if verdict == "data_bound" and cpu_ms:
        floor = max(floor, cpu_ms / cores)
    return step_ms / max(floor, 1e-9)


def verify(run_dir: Path, steps: int, train_cmd: tuple[str, ...] = INSTALLED_TRAIN) -> dict:
    run = load_run(run_dir)
    cfg = run["config"]
    diag = run["diagnosis"]
    verdict = diag["verdict"]
    span = diag["spans"][0]
    remedy = remedy_for(verdict, cfg, span.get("findings", []))
    base = _flag_args(cfg) + ["--steps", str(steps)]
    fixed = _with(base, remedy.flags)
    out_dir = run_dir / "verify"
    if out_dir.exists():
        raise VerifyError(f"{out_dir} exists: this run was verified already (remove it to verify again)")
    base_ms = timed_run(base, out_dir, "baseline", train_cmd)
    fixed_ms = timed_run(fixed, out_dir, "remedy", train_cmd)
    measured = base_ms / fixed_ms
    cpu_ms = (run.get("final", {}).get("telemetry") or {}).get("cpu_ms")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    predicted = predicted_speedup(span, verdict, span["metrics"]["step_ms"], cpu_ms, cores)
    if measured < MIN_SPEEDUP:
        result = "refuted"
    elif measured - 1 >= HALF * (predicted - 1):
        result = "confirmed"
    else:
        result = "inconclusive"
    return {"verdict": verdict, "remedy": list(remedy.flags), "why": remedy.why, "result": result,
            "baseline_step_ms": base_ms, "remedy_step_ms": fixed_ms, "measured_speedup": measured,
            "predicted_speedup": predicted, "cpu_ms_per_step": cpu_ms, "cores": cores, "steps": steps,
            "min_speedup": MIN_SPEEDUP,
            "share_of_predicted_gain_required": HALF}


def _core_bound(v: dict) -> str:
    if v["verdict"] != "data_bound" or not v.get("cpu_ms_per_step"):
        return ""
    return (f", at most what {v['cores']} cores allow for {v['cpu_ms_per_step']:.1f} ms of the training process's "
            "CPU time per step")


def record(run_dir: Path, v: dict) -> str:
    """Write the result into run.json, diagnosis.md and TensorBoard; returns the Markdown section."""
    md = (f"## Verification: `{v['result']}`\n\n{v['verdict']}: the remedy `{' '.join(v['remedy'])}` ({v['why']}) "
          f"took the unprofiled step from {v['baseline_step_ms']:.3f} to {v['remedy_step_ms']:.3f} ms: "
          f"{v['measured_speedup']:.2f}x measured, {v['predicted_speedup']:.2f}x predicted by the verdict's "
          f"cost{_core_bound(v)} (confirmed from {MIN_SPEEDUP:.2f}x and half the predicted gain).\n")
    run = json.loads((run_dir / "run.json").read_text())
    run["verification"] = v
    write_text_atomic(run_dir / "run.json", json.dumps(run, indent=2, allow_nan=False) + "\n")
    diag = run_dir / "diagnosis.md"
    write_text_atomic(diag, (diag.read_text() if diag.is_file() else "") + "\n" + md)
    with EventLog(run_dir) as tb:
        tb.text("verification", md, 0)
        tb.scalars({"verify/baseline_step_ms": v["baseline_step_ms"], "verify/remedy_step_ms": v["remedy_step_ms"],
                    "verify/measured_speedup": v["measured_speedup"]}, 0)
    return md


def main(argv: list[str] | None = None, prog: str = "stepscope verify",
         train_cmd: tuple[str, ...] = INSTALLED_TRAIN) -> int:
    p = OneLineParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a profiled run of stepscope train")
    p.add_argument("--steps", type=int, default=300, help="steps per timed run (default 300)")
    a = p.parse_args(argv)
    if a.steps < 30:
        p.error(f"--steps {a.steps} is too few for a stable median; use 30 or more")
    try:
        v = verify(a.run_dir, a.steps, train_cmd)
    except VerifyError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    print(record(a.run_dir, v).strip().splitlines()[-1])
    return 0 if v["result"] != "refuted" else 1


if __name__ == "__main__":
    sys.exit(main())
