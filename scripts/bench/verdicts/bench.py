"""How often is the verdict right? Scenarios with injected, known causes, truth measured without the profiler.

    python scripts/verdict_bench.py --out /tmp/vb                     # every GPU scenario (one GPU run)
    python scripts/verdict_bench.py --out /tmp/vb --only gpt_tiny tiny_ops
    python scripts/verdict_bench.py --out /tmp/vb --device cpu        # the CPU subset (CI-sized)
    python scripts/verdict_bench.py --out /tmp/vbh --set holdout      # families the analysis was never fitted on
    python scripts/verdict_bench.py --rescore /tmp/vb                 # re-analyse saved traces, no GPU needed

For each scenario (gpu.py, holdout.py, cpu.py): measure the truth unprofiled (truth.py: step
time, GPU time by CUDA-graph replay, the step with the cause removed), derive the expected verdict from those
numbers, time 30 unprofiled steps with the trainer's own StepClock (the telemetry a stepscope run records),
profile 3 steps with record_shapes, profile_memory and with_stack, and diagnose the trace twice: as a
stranger's trace ("diagnosis": no telemetry, the profiler-overhead model) and as a stepscope run's
("diagnosis_run": with that telemetry). Writes OUT/results.json (one row per scenario: truth, telemetry,
expected and diagnosed verdicts, GPU busy truth vs diagnosed vs as profiled, the profiler-inflation
calibration data) and OUT/results.md (for each way: the rows, a confusion matrix, precision and recall per
verdict, the GPU-busy error), and prints the Markdown. Traces stay under OUT/traces/<scenario>/ with
truth.json and telemetry.json beside each.
Bad flags: one line on stderr, exit code 2.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from stepscope.analysis import TraceError
from stepscope.report.front import analyze

from bench.verdicts.score import score_rows, to_markdown

CPU_SCENARIOS = ("cpu_compute", "cpu_loader", "cpu_host_python", "cpu_comm")
# the held-out families' names, without importing torch (holdout.py defines them)
HOLDOUT_ORDER = ("vit_tiny_bs8", "vit_tiny_bs256", "vit_pageable", "bert_bs8", "bert_host_sync", "convnext_loader",
                 "mlp_adamw_loop")
GPU_ORDER = ("cold_start", "resnet18_bs32", "resnet18_bs128", "resnet18_bs1024", "resnet50_pinned", "gpt_tiny",
             "gpt_large", "hf_gpt2_small", "tiny_ops", "loader_in_process", "loader_two_workers",
             "loader_catching_up", "loader_ahead", "compile_reduce_overhead", "pageable_copy", "host_python",
             "adamw_cpu_scalars", "compile_default")


def diagnose(run_dir: Path, telemetry: dict | None = None) -> dict:
    report = analyze(run_dir, telemetry=telemetry or {})  # {}: the traces alone, never run.json's
    if report.distributed:  # a multi-rank scenario: the job's verdict and its stragglers
        cycle = report.distributed[0]
        return {"verdict": report.verdict, "stragglers": list(cycle.stragglers), "gpu_busy_pct": None,
                "profiled_gpu_busy_pct": None, "ranks": [s.to_dict()["verdict"] for s in report.spans]}
    d = report.spans[0].to_dict()  # one profiling cycle per scenario
    return {"verdict": d["verdict"], "gpu_busy_pct": d["metrics"]["gpu_busy_pct"],
            "profiled_gpu_busy_pct": d["metrics"]["profiled"]["gpu_busy_pct"],
            "profiled_step_ms": d["metrics"]["profiled"]["step_ms"], "step_ms": d["metrics"]["step_ms"],
            "uncertainty": d.get("uncertainty"), "syncs_per_step": d["metrics"]["syncs_per_step"],
            "findings": [f["id"] for f in d["findings"]], "events_per_step":
            d["profiler_inflation"]["events_per_step"], "host_step_ms": d["metrics"]["profiled"]["host_step_ms"],
            "device_ms": sum(d["breakdown_profiled_ms_per_step"].get(b, 0.0)
                             for b in ("gpu_busy", "transfer", "device_idle", "communication"))}


# profiled straight after unprofiled steps, as in the middle of training: a worker-fed loader's queue is in its
# steady state when the profiler starts (the truth's timings, the fix included, come after)
STEADY_FIRST = ("loader_catching_up",)
STEADY_STEPS = 30
# beside truth.json: the unprofiled steps' telemetry as stepscope's trainer records it (run.json's
# final.telemetry), measured in the same process straight after the truth's own steps (before the
# profiled window; after it for cold_start, whose window is the process's first steps)
TELEMETRY_FILE = "telemetry.json"


def run_scenario(name: str, out: Path, device) -> dict:
    import torch

    from bench.verdicts.gpu import WORKLOADS
    from bench.verdicts.truth import expected_verdict, measure, record_trace, run_telemetry

    if name not in WORKLOADS:
        from bench.verdicts.holdout import HOLDOUT as WORKLOADS
    torch.manual_seed(0)
    w = WORKLOADS[name](device)
    cold = name == "cold_start"
    t0 = time.perf_counter()
    if cold:
        run_dir = record_trace(w, out / "traces", device, cold=True)
        truth = measure(w, device, with_telemetry=True)  # the warm steps a run goes on with
        telemetry = truth.pop("telemetry")
    elif name in STEADY_FIRST:
        telemetry = run_telemetry(w, device, steps=STEADY_STEPS)
        run_dir = record_trace(w, out / "traces", device)
        truth = measure(w, device)
    else:
        truth = measure(w, device, with_telemetry=True)
        telemetry = truth.pop("telemetry")
        run_dir = record_trace(w, out / "traces", device)
    expected, confirmed = expected_verdict(w, truth)
    truth.update(expected=expected, confirmed=confirmed, cause=w.cause, family=w.family,
                 gpu_busy_pct=None if truth["gpu_ms"] is None else min(100.0, 100 * truth["gpu_ms"] / truth["step_ms"]))
    (run_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    (run_dir / TELEMETRY_FILE).write_text(json.dumps(telemetry, indent=1) + "\n")
    row = {"scenario": name, "truth": truth, "telemetry": telemetry, **diagnoses(run_dir, telemetry),
           "seconds": time.perf_counter() - t0}
    del w
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def cpu_scenario(name: str, out: Path) -> dict:
    from bench.verdicts.cpu import run_cpu_scenario

    run_dir, truth = run_cpu_scenario(name, out / "traces")
    (run_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return {"scenario": name, "truth": truth, "diagnosis": diagnose(run_dir)}


def diagnoses(run_dir: Path, telemetry: dict | None) -> dict:
    """The trace diagnosed as a stranger's ("diagnosis": the overhead model) and, where the unprofiled steps'
    telemetry was recorded, as a stepscope run's ("diagnosis_run": the figures from that telemetry)."""
    out = {"diagnosis": diagnose(run_dir)}
    if telemetry:
        out["diagnosis_run"] = diagnose(run_dir, telemetry)
    return out


def rescore(out: Path) -> list[dict]:
    """Re-diagnose saved traces against their truth.json (after an analysis change), no GPU needed."""
    rows = []
    for truth_file in sorted(out.glob("traces/*/truth.json")):
        truth = json.loads(truth_file.read_text())
        tel_file = truth_file.parent / TELEMETRY_FILE
        telemetry = json.loads(tel_file.read_text()) if tel_file.exists() else None
        rows.append({"scenario": truth_file.parent.name, "truth": truth, "telemetry": telemetry,
                     **diagnoses(truth_file.parent, telemetry)})
    return rows


def main(argv: list[str] | None = None) -> int:
    from stepscope.cli.oneline import OneLineParser

    p = OneLineParser(prog="verdict_bench.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="where results and traces go (created)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--set", dest="scenario_set", default="main", choices=["main", "holdout"],
                   help="GPU scenarios: the main set, or the held-out families (bench.verdicts.holdout)")
    p.add_argument("--only", nargs="+", metavar="SCENARIO")
    p.add_argument("--rescore", type=Path, metavar="OUT", help="re-analyse the traces of an earlier --out")
    a = p.parse_args(argv)
    if a.rescore is not None:
        if not a.rescore.is_dir():
            p.error(f"--rescore {a.rescore}: not a directory of an earlier run")
        rows, out = rescore(a.rescore), a.rescore
    else:
        if a.out is None:
            p.error("--out is required (or --rescore)")
        if a.device == "cpu" and a.scenario_set != "main":
            p.error("--set holdout is a GPU set; drop it with --device cpu")
        names = CPU_SCENARIOS if a.device == "cpu" else GPU_ORDER if a.scenario_set == "main" else HOLDOUT_ORDER
        unknown = [n for n in (a.only or []) if n not in names]
        if unknown:
            p.error(f"unknown scenario {unknown[0]!r} for --device {a.device}; valid: {', '.join(names)}")
        import torch

        if a.device == "cuda" and not torch.cuda.is_available():
            p.error("--device cuda but no CUDA GPU is visible; use --device cpu")
        out = a.out
        out.mkdir(parents=True, exist_ok=True)
        rows = []
        for name in [n for n in names if not a.only or n in a.only]:
            print(f"[{time.strftime('%H:%M:%S')}] {name} ...", file=sys.stderr, flush=True)
            try:
                row = cpu_scenario(name, out) if a.device == "cpu" else run_scenario(name, out, torch.device("cuda"))
            except (TraceError, RuntimeError, OSError, ValueError) as e:
                traceback.print_exc()
                row = {"scenario": name, "error": f"{type(e).__name__}: {e}"}
            rows.append(row)
            (out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")  # as it goes
    scored = score_rows(rows)
    scored_run = score_rows(rows, "diagnosis_run")
    (out / "results.json").write_text(json.dumps({"rows": rows, "score": scored, "score_run": scored_run},
                                                 indent=1) + "\n")
    md = "As strangers' traces (no telemetry: the profiler-overhead model)\n\n" + to_markdown(rows, scored)
    if scored_run["scenarios"]:
        md += ("\nAs stepscope runs (the unprofiled steps' telemetry, recorded as the trainer does)\n\n"
               + to_markdown(rows, scored_run, "diagnosis_run"))
    (out / "results.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
