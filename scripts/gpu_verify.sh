#!/usr/bin/env bash
# Every GPU claim of the README and BENCHMARKS.md, checked in one go on a CUDA machine.
#
#   bash scripts/gpu_verify.sh OUT_DIR [parts...]     parts: tests train compare overhead bench (default: all)
#
# Writes logs and JSON under OUT_DIR; prints a short summary at the end. Expects torch-tb-profiler (and pytest,
# hypothesis) either installed or as wheels in .whl/ (see README, "Working on a GPU machine").
set -uo pipefail
OUT=${1:?usage: gpu_verify.sh OUT_DIR [parts...]}
shift
PARTS=${*:-tests train compare overhead bench}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
L=/tmp/stepscope-gpu-logs
rm -rf "$L"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch,torchvision;print("torch",torch.__version__,"torchvision",torchvision.__version__,"cuda",torch.version.cuda)'
  date -u +%F; } | tee "$OUT/env.txt"

has() { [[ " $PARTS " == *" $1 "* ]]; }

if has tests; then
  echo "=== CUDA tests"
  python3 -m kernels.build 2>&1 | tail -2
  python3 -m pytest -q -m cuda tests 2>&1 | tee "$OUT/cuda_tests.log" | tail -15
fi

if has train; then
  echo "=== train.py --profile, resnet18 bs128 (eager), then what the plugin shows"
  python3 scripts/train.py --profile --arch resnet18 --batch-size 128 --steps 200 --logdir "$L" --run-name r18 \
    > "$OUT/train_r18.log" 2>&1; echo "exit $?"
  grep -E "verdict|completed|tensorboard" "$OUT/train_r18.log" | head -8
  python3 scripts/train.py --profile --arch resnet18 --batch-size 128 --steps 200 --ops custom --logdir "$L" \
    --run-name r18custom > "$OUT/train_r18_custom.log" 2>&1; echo "exit $?"
  python3 scripts/plugin_check.py "$L" r18 r18custom > "$OUT/plugin_r18.json" 2> "$OUT/plugin_r18.err"
  python3 - "$OUT/plugin_r18.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for run, r in d.items():
    print(run, r["views"], {k: round(v) for k, v in r["overview_us_per_step"].items()},
          "op device us", r["operator_device_self_us"], "kernel us", r.get("kernel_total_us"))
EOF
  (cd "$L" && tar czf "$OUT/r18_runs.tgz" r18 r18custom --exclude='events.out.*')
fi

if has compare; then
  echo "=== compare.py: eager / compile reduce-overhead / cuda-graphs x native / custom"
  python3 scripts/compare.py --arch resnet18 --batch-size 128 --steps 400 --logdir "$L" --name cmp \
    > "$OUT/compare.log" 2>&1; echo "exit $?"
  cp "$L/cmp/compare.json" "$L/cmp/compare.md" "$OUT/" 2>/dev/null; cat "$OUT/compare.md" 2>/dev/null
fi

if has overhead; then
  echo "=== profiler overhead: 600 steps, default schedule, with vs without --profile, 3 alternating pairs"
  for i in 1 2 3; do
    for p in plain profiled; do
      flag=$([ $p = profiled ] && echo --profile || true)
      python3 scripts/train.py $flag --arch resnet18 --batch-size 128 --steps 600 --logdir "$L" \
        --run-name "ovh-$p-$i" > "$OUT/ovh-$p-$i.log" 2>&1 || echo "overhead run $p $i failed"
    done
  done
  python3 - "$L" <<'EOF' | tee "$OUT/overhead.txt"
import json, statistics, sys
from pathlib import Path
L = Path(sys.argv[1])
m = {p: [json.loads((L / f"ovh-{p}-{i}" / "run.json").read_text())["final"]["mean_step_ms"] for i in (1, 2, 3)]
     for p in ("plain", "profiled")}
a, b = statistics.median(m["plain"]), statistics.median(m["profiled"])
print("mean step ms per run:", m)
print(f"median of means: plain {a:.3f} ms, profiled {b:.3f} ms, overhead {100 * (b / a - 1):+.2f}%")
EOF
fi

if has bench; then
  echo "=== scripts/bench_ops.py"
  python3 scripts/bench_ops.py --out "$OUT/bench_ops.json" --plot "$OUT/sweep.png" > "$OUT/bench_ops.log" 2>&1
  echo "exit $?"; tail -40 "$OUT/bench_ops.log"
fi
