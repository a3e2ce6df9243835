"""Score verdicts against measured truth: confusion matrix, precision and recall, GPU-busy error.

    scored = score_rows(rows)        # rows as scripts/verdict_bench.py writes them
    print(to_markdown(rows, scored))
    print(to_markdown(rows, score_rows(rows, "diagnosis_run"), "diagnosis_run"))   # the runs' diagnoses

A row counts when its truth has an expected verdict; a scenario whose intervention did not confirm the cause
(`confirmed` false) is listed but left out of the matrix, since its truth is then not known. `key` picks the
diagnosis: "diagnosis" (the trace as a stranger's) or "diagnosis_run" (with the run's telemetry); rows
without it are left out. Every verdict must be one of the registry's (trainer/analysis/verdicts.py).
Pure Python.
"""

from __future__ import annotations

import statistics
from collections import Counter

from stepscope.analysis.verdicts import by_name

BUSY_TOLERANCE_PP = 5.0


def _counted(rows: list[dict]) -> list[dict]:
    return [r for r in rows if "error" not in r and r["truth"].get("confirmed") is not False]


def score_rows(rows: list[dict], key: str = "diagnosis") -> dict:
    rows = [r for r in rows if "error" in r or key in r]
    counted = _counted(rows)
    pairs = [(r["truth"]["expected"], r[key]["verdict"]) for r in counted]
    for name in {v for p in pairs for v in p}:
        by_name(name)  # KeyError for a name that is not a verdict (a workload's typo, a stale result)
    labels = sorted({v for p in pairs for v in p})
    matrix = Counter(pairs)
    per_verdict = {}
    for v in labels:
        tp = matrix[(v, v)]
        predicted = sum(c for (_, d), c in matrix.items() if d == v)
        actual = sum(c for (e, _), c in matrix.items() if e == v)
        per_verdict[v] = {"precision": tp / predicted if predicted else None,
                          "recall": tp / actual if actual else None, "support": actual}
    errors = [abs(r[key]["gpu_busy_pct"] - r["truth"]["gpu_busy_pct"]) for r in counted
              if r["truth"].get("gpu_busy_pct") is not None and r[key].get("gpu_busy_pct") is not None]
    raw = [abs(r[key]["profiled_gpu_busy_pct"] - r["truth"]["gpu_busy_pct"]) for r in counted
           if r["truth"].get("gpu_busy_pct") is not None and r[key].get("profiled_gpu_busy_pct") is not None]
    # the truth's GPU time over the step as the run itself measured it (its telemetry, timed beside the
    # truth's steps): what is left is the analysis's error, without the host's drift between the two timings
    same = [abs(r[key]["gpu_busy_pct"] - min(100.0, 100 * r["truth"]["gpu_ms"] / r["telemetry"]["step_ms"]))
            for r in counted if r["truth"].get("gpu_ms") and (r.get("telemetry") or {}).get("step_ms")
            and r[key].get("gpu_busy_pct") is not None] if key == "diagnosis_run" else []
    confirmed = [r for r in rows if "error" not in r and r["truth"].get("confirmed") is not None]
    return {
        "scenarios": len(rows), "counted": len(counted), "correct": sum(e == d for e, d in pairs),
        "labels": labels, "matrix": [[matrix[(e, d)] for d in labels] for e in labels],
        "per_verdict": per_verdict,
        "gpu_busy_abs_error_pp": {"median": statistics.median(errors) if errors else None,
                                  "max": max(errors) if errors else None,
                                  "within_5pp": sum(e <= BUSY_TOLERANCE_PP for e in errors), "n": len(errors)},
        "profiled_gpu_busy_abs_error_pp": {"median": statistics.median(raw) if raw else None,
                                           "max": max(raw) if raw else None},
        "same_steps_gpu_busy_abs_error_pp": {"median": statistics.median(same) if same else None,
                                             "max": max(same) if same else None,
                                             "within_5pp": sum(e <= BUSY_TOLERANCE_PP for e in same), "n": len(same)},
        "intervention_confirmed": {"yes": sum(bool(r["truth"]["confirmed"]) for r in confirmed),
                                   "of": len(confirmed)},
    }


def _f(v, spec=".1f") -> str:
    return "–" if v is None else format(v, spec)


def to_markdown(rows: list[dict], s: dict, key: str = "diagnosis") -> str:
    out = ["| scenario | family | step ms (truth) | GPU busy % truth / diagnosed / as profiled | expected "
           "| diagnosed | cause removed: speed-up |", "|---|---|---:|---|---|---|---|"]
    for r in rows:
        if "error" not in r and key not in r:
            continue
        if "error" in r:
            out.append(f"| {r['scenario']} | | | | | error: {r['error'][:80]} | |")
            continue
        t, d = r["truth"], r[key]
        fixed = t.get("fixed_step_ms")
        speed = f"{t['step_ms'] / fixed:.2f}x ({t['intervention']})" if fixed else "–"
        mark = "" if t["expected"] == d["verdict"] else " **miss**"
        if t.get("confirmed") is False:
            mark += " (cause not confirmed: not counted)"
        out.append(f"| {r['scenario']} | {t.get('family', '')} | {t['step_ms']:.2f} | {_f(t.get('gpu_busy_pct'))} / "
                   f"{_f(d['gpu_busy_pct'])} / {_f(d['profiled_gpu_busy_pct'])} | {t['expected']} | "
                   f"{d['verdict']}{mark} | {speed} |")
    labels = s["labels"]
    out += ["", f"Right: {s['correct']} of {s['counted']} counted scenarios ({s['scenarios']} run).", "",
            "| expected \\ diagnosed | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    out += [f"| {e} | " + " | ".join(str(c) for c in row) + " |" for e, row in zip(labels, s["matrix"])]
    out += ["", "| verdict | precision | recall | support |", "|---|---:|---:|---:|"]
    out += [f"| {v} | {_f(p['precision'], '.2f')} | {_f(p['recall'], '.2f')} | {p['support']} |"
            for v, p in s["per_verdict"].items()]
    e, raw = s["gpu_busy_abs_error_pp"], s["profiled_gpu_busy_abs_error_pp"]
    c = s["intervention_confirmed"]
    out += ["", f"GPU busy error vs the unprofiled truth: median {_f(e['median'])} pp, max {_f(e['max'])} pp, "
                f"{e['within_5pp']} of {e['n']} within 5 pp (read off the profiled steps alone: median "
                f"{_f(raw['median'])} pp, max {_f(raw['max'])} pp).",
            f"Removing the injected cause confirmed it in {c['yes']} of {c['of']} scenarios.", ""]
    same = s.get("same_steps_gpu_busy_abs_error_pp") or {}
    if same.get("n"):
        out[-1:-1] = [f"Against the truth's GPU time over the run's own measured step (its telemetry, timed beside "
                      f"the truth's steps): median {_f(same['median'])} pp, max {_f(same['max'])} pp, "
                      f"{same['within_5pp']} of {same['n']} within 5 pp."]
    return "\n".join(out)
