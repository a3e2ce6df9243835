#!/usr/bin/env bash
# Every GPU claim of the README and BENCHMARKS.md, checked in one go on a CUDA machine.
#
#   bash scripts/gpu_verify.sh OUT_DIR [parts...]     parts: compare plugin overhead tests bench
#                                                     (default: compare plugin overhead tests)
#
# Parts run in that order (most important first), each bounded by its own timeout, and write logs and JSON under
# OUT_DIR as they go, so a cut-off run still leaves what it measured. Expects torch-tb-profiler (and pytest,
# hypothesis) installed or as wheels in .whl/ (README, "Working on a GPU machine").
set -uo pipefail
OUT=${1:?usage: gpu_verify.sh OUT_DIR [parts...]}
shift
PARTS=${*:-compare plugin overhead tests}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
L=/tmp/stepscope-gpu-logs
rm -rf "$L"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch,torchvision;print("torch",torch.__version__,"torchvision",torchvision.__version__,"cuda",torch.version.cuda)'
  date -u +%FT%TZ; } | tee "$OUT/env.txt"
has() { [[ " $PARTS " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

if has compare || has tests || has bench; then
  stamp "build the stepscope ops (CUDA)"
  timeout 120 python3 -m kernels.build > "$OUT/kernels_build.log" 2>&1; tail -3 "$OUT/kernels_build.log"
fi

if has compare; then
  stamp "compare.py: eager / compile reduce-overhead / cuda-graphs x native / custom; resnet18 bs128"
  timeout 330 python3 scripts/compare.py --arch resnet18 --batch-size 128 --steps 300 --logdir "$L" --name cmp \
    > "$OUT/compare.log" 2>&1; echo "exit $?"
  cp "$L"/cmp/compare.json "$L"/cmp/compare.md "$OUT/" 2>/dev/null; cat "$OUT/compare.md" 2>/dev/null \
    || tail -20 "$OUT/compare.log"
  for r in "$L"/cmp/*/; do [ -f "$r/diagnosis.md" ] && { echo "## $r"; cat "$r/diagnosis.md"; } >> "$OUT/diagnoses.md"; done
fi

if has plugin; then
  stamp "what the PyTorch Profiler tab shows for the eager runs (HTTP API)"
  if [ -d "$L/cmp" ]; then root="$L/cmp"; runs="eager-native eager-custom"; else root="$L"; runs="ovh-profiled-1"; fi
  timeout 120 python3 scripts/plugin_check.py "$root" $runs > "$OUT/plugin.json" 2> "$OUT/plugin.err"
  python3 - "$OUT/plugin.json" <<'EOF'
import json, sys
for run, r in json.load(open(sys.argv[1])).items():
    print(run, r["views"], {k: round(v) for k, v in r["overview_us_per_step"].items()},
          "op device us", r["operator_device_self_us"], "kernel us", r.get("kernel_total_us"))
EOF
  (cd "$root" && tar czf "$OUT/plugin_runs.tgz" --exclude='events.out.*' $runs) 2>/dev/null
fi

if has overhead; then
  stamp "profiler overhead: 600 steps, default schedule, with vs without --profile, 2 alternating pairs"
  for i in 1 2; do
    for p in plain profiled; do
      flag=$([ $p = profiled ] && echo --profile || true)
      timeout 60 python3 scripts/train.py $flag --arch resnet18 --batch-size 128 --steps 600 --log-every 50 \
        --logdir "$L" --run-name "ovh-$p-$i" > "$OUT/ovh-$p-$i.log" 2>&1 || echo "overhead run $p $i failed"
    done
  done
  python3 - "$L" <<'EOF' | tee "$OUT/overhead.txt"
import json, statistics, sys
from pathlib import Path
L = Path(sys.argv[1])
m = {p: [json.loads((L / f"ovh-{p}-{i}" / "run.json").read_text())["final"] for i in (1, 2)
         if (L / f"ovh-{p}-{i}" / "run.json").exists()] for p in ("plain", "profiled")}
for p, fs in m.items():
    print(p, [(round(f["mean_step_ms"], 3), round(f["median_step_ms"], 3), f["timed_steps"]) for f in fs])
a = statistics.median(f["mean_step_ms"] for f in m["plain"])
b = statistics.median(f["mean_step_ms"] for f in m["profiled"])
print(f"median of mean step ms: plain {a:.3f}, profiled {b:.3f}, overhead {100 * (b / a - 1):+.2f}%")
EOF
fi

if has tests; then
  stamp "CUDA tests"
  timeout 150 python3 -m pytest -q -m cuda tests -p no:cacheprovider > "$OUT/cuda_tests.log" 2>&1
  tail -12 "$OUT/cuda_tests.log"
fi

if has bench; then
  stamp "scripts/bench_ops.py"
  python3 scripts/bench_ops.py --out "$OUT/bench_ops.json" --plot "$OUT/sweep.png" > "$OUT/bench_ops.log" 2>&1
  echo "exit $?"; tail -40 "$OUT/bench_ops.log"
fi
stamp "done"
