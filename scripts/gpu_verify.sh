#!/usr/bin/env bash
# Every GPU claim of the README and BENCHMARKS.md, checked in one go on a CUDA machine.
#
#   bash scripts/gpu_verify.sh OUT_DIR [parts...]     parts: verdicts holdout loops after integrations gaps nvml verdicts_ddp verify
#                                                     verify_extra ddp compare overhead plugin tests bench ops ops_processes calibrate
#                                                     memory memory_extra memory_verify memory_bisect memory_predict memory_ddp capture
#                                                     (default: compare overhead plugin tests)
#
# loops: the same scenarios (and the held-out families) as plain loops with stepscope.schedule +
# stepscope.trace_handler (scripts/verdict_loops.py), and what the schedule costs per step (bench_schedule.py);
# VL_ARGS / VLH_ARGS pick scenarios ("--only resnet18_bs32 ..."), LOOPS_ENV sets variables for both runs.
# after: scripts/bench_after_profiling.py, a loop's speed before and after one profiling cycle, per mode
# (AP_ARGS, e.g. "--only resnet18_bs32 --modes default teardown"). integrations: scripts/verdict_integrations.py,
# the Lightning and Hugging Face callbacks on one scenario each against their truth. gaps:
# scripts/bench_graph_gaps.py, a CUDA-graph replay's span against its kernels' time (GAPS_ARGS, "--only ...").
# nvml: scripts/bench_nvml_busy.py, the driver's GPU-utilisation samples against duty cycles of known busy share.
# verdicts: scripts/verdict_bench.py's GPU scenarios and a Lightning run (truth unprofiled, traces, scores);
# their traces come back as OUT_DIR/verdict_traces.tar.* (15 MB pieces). verdicts_ddp (2 GPUs): the NCCL
# scenarios of scripts/verdict_ddp.py (communication-bound, straggler, balanced). verify: stepscope verify on
# a launch-bound eager run and on a data-bound CIFAR-format run, and a table of predicted vs measured
# speed-ups (OUT_DIR/verify_predictions.md). verify_extra: the same for the other remedies (--compile
# reduce-overhead on CIFAR data with 8 workers, --pin-memory on pageable host data, fewer logging syncs;
# VX_RUNS="cifar_launch pageable logsync" picks some of them).
#
# ops: the custom ops' cost in training: bench_step_ops.py (native and custom ResNet-18 steps interleaved in
# one process; eager 3 times, reduce-overhead once), bench_ops.py --per-call (interleaved rounds), then
# compare.py, eager and reduce-overhead, in both orders of the two op sets (OPS_REPS times, default 2; each
# variant its own process, so host drift between processes shows too). ops_processes: bench_ops_processes.py,
# OPP_PAIRS (16) alternating unprofiled train.py pairs of OPP_STEPS (250) steps, native vs custom, with a sign
# test (OPP_ARGS adds flags, e.g. "--compile reduce-overhead"; OPP_TIMEOUT, 480 s).
#
# calibrate: scripts/calibrate_overhead.py, the overhead model's predicted vs measured unprofiled step per
# family, loop style (eager, compiled, Lightning, Hugging Face) and recording option (none, shapes, memory,
# stacks, all), one style after another (CAL_STYLES, default "eager compiled lightning hf"; each bounded by
# CAL_TIMEOUT, 280 s); the joined Markdown table in OUT_DIR/calibration.md for BENCHMARKS.md (CAL_ARGS adds
# flags, e.g. "--families gru,transformer"; Lightning and HF need lightning / transformers installed).
#
# memory: scripts/verify_memory.py --parts peaks oom history, each profiled step's peak from the trace against
# torch.cuda.max_memory_allocated() on the loop families (plain torch.profiler, stepscope.schedule, the trainer),
# a real out-of-memory capture and the cost of allocation stacks; memory_extra: --parts boundary causes, the
# predicted largest batch tried at
# 0.9x and 1.1x in fresh processes, injected causes MEM_REPS (3) times with and without, and stepscope verify
# --memory on a profiled resnet18 run (OUT_DIR/memory_verify.json); the first churn run's trace is kept in
# OUT_DIR/memory_extra/churn_trace. memory_bisect: --parts bisect, per family the predicted largest batch against
# the out-of-memory boundary found by bisection in fresh processes (to 2%), with every try's peaks
# (MEMB_BUDGET seconds shared by the families, default 420; MEMB_ARGS, e.g. "--bisect-families resnet50 gpt").
# memory_predict: --parts predict, the prediction alone against the boundaries bisected before on this GPU model
# (MEMP_ARGS, e.g. "--families resnet50 gpt"; MEMP_KEEP=1: the recorded traces in OUT_DIR/predict_traces.tgz). memory_verify: memory_extra's stepscope verify --memory alone.
# memory_ddp (2 GPUs): --parts ddp_peaks, each rank's trace peaks of a DDP loop under torchrun against its own
# max_memory_allocated (MEMD_ARGS, e.g. "--ddp-family gpt"). All write OUT_DIR/memory*/memory_truth.json and a log.
# capture: the trainer's profiled run on the shared capture stack (two cycles, every export), its files and
# cycles.jsonl, then tests/test_one_capture_stack.py and tests/test_ddp_cuda.py.
#
# ddp needs 2 GPUs: the graphed-DDP CUDA tests, 1 -> 2 GPU scaling per step kind, a profiled NCCL run in the
# plugin's Distributed view, and profiler-overhead pairs run side by side on the two GPUs.
# Parts run in the order given, each bounded by its own timeout, and write logs and JSON under
# OUT_DIR as they go, so a cut-off run still leaves what it measured. Knobs: VB_ARGS (verdicts: e.g. "--only
# loader_ahead", which also skips Lightning), OVH_PAIRS (6), OVH_GRAPH_PAIRS (3),
# OVH_TIMEOUT (420 s), BENCH_ARGS (e.g. "--no-compile --reps 50"), BENCH_TIMEOUT (300 s). Expects torch-tb-profiler (and pytest,
# hypothesis) installed or as wheels in .whl/ (docs/gpu.md).
set -uo pipefail
OUT=${1:?usage: gpu_verify.sh OUT_DIR [parts...]}
shift
PARTS=${*:-compare overhead plugin tests}
ALL_PARTS="verdicts holdout loops after integrations gaps nvml verdicts_ddp verify verify_extra ddp compare overhead plugin tests bench ops ops_processes calibrate memory memory_extra memory_verify memory_bisect memory_predict memory_ddp capture"
for part in $PARTS; do
  if [[ " $ALL_PARTS " != *" $part "* ]]; then
    echo "gpu_verify.sh: error: unknown part '$part'; parts are $ALL_PARTS" >&2; exit 2
  fi
done
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
# this checkout, installed editable the README's way (no index: the image has setuptools; wheels in .whl/)
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > "$OUT/install.log" 2>&1 \
  || { tail -5 "$OUT/install.log"; echo "gpu_verify.sh: error: cannot install this checkout" >&2; exit 1; }
L=/tmp/stepscope-gpu-logs
rm -rf "$L"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch,torchvision;print("torch",torch.__version__,"torchvision",torchvision.__version__,"cuda",torch.version.cuda)'
  date -u +%FT%TZ; } | tee "$OUT/env.txt"
has() { [[ " $PARTS " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

if has compare || has tests || has bench || has ops || has ops_processes; then
  stamp "build the stepscope ops (CUDA)"
  timeout 400 python3 -m stepscope.kernels.build > "$OUT/kernels_build.log" 2>&1; tail -3 "$OUT/kernels_build.log"
fi


part_verdicts() {
  stamp "verdict_bench.py: GPU scenarios, truth without the profiler"
  timeout "${VERDICT_TIMEOUT:-420}" python3 scripts/verdict_bench.py --out "$L/vb" ${VB_ARGS:-} > "$OUT/verdicts.log" 2>&1
  echo "exit $?"
  stamp "Lightning's PyTorchProfiler"
  [ -n "${VB_ARGS:-}" ] || timeout 150 python3 scripts/record_lightning.py --out "$L/vb/traces" > "$OUT/lightning.log" 2>&1; echo "exit $?"
  tail -2 "$OUT/lightning.log"
  python3 scripts/verdict_bench.py --rescore "$L/vb" > "$OUT/verdicts.md" 2>> "$OUT/verdicts.log"
  cp "$L/vb/results.json" "$OUT/verdicts.json" 2>/dev/null; cat "$OUT/verdicts.md"
  (cd "$L/vb" && tar cf - traces | split -b 15M - "$OUT/verdict_traces.tar.")
}

part_holdout() {
  stamp "verdict_bench.py --set holdout: families the analysis was never fitted on (timm, HF BERT, MLP)"
  timeout "${HOLDOUT_TIMEOUT:-400}" python3 scripts/verdict_bench.py --set holdout --out "$L/vbh" \
    > "$OUT/holdout.log" 2>&1
  echo "exit $?"
  cp "$L/vbh/results.json" "$OUT/holdout.json" 2>/dev/null; cat "$L/vbh/results.md" 2>/dev/null
  (cd "$L/vbh" && tar cf - traces | split -b 15M - "$OUT/holdout_traces.tar.")
}

part_loops() {
  stamp "verdict_loops.py: the suite's scenarios as plain loops, stepscope.schedule + stepscope.trace_handler"
  env ${LOOPS_ENV:-} timeout "${LOOPS_TIMEOUT:-480}" python3 scripts/verdict_loops.py --out "$L/vl" ${VL_ARGS:-} \
    > "$OUT/loops.log" 2>&1
  echo "exit $?"
  cp "$L/vl/results.json" "$OUT/loops.json" 2>/dev/null; cat "$L/vl/results.md" 2>/dev/null
  stamp "verdict_loops.py --set holdout"
  env ${LOOPS_ENV:-} timeout "${LOOPS_TIMEOUT:-480}" python3 scripts/verdict_loops.py --set holdout --out "$L/vlh" \
    ${VLH_ARGS:-} > "$OUT/loops_holdout.log" 2>&1
  echo "exit $?"
  cp "$L/vlh/results.json" "$OUT/loops_holdout.json" 2>/dev/null; cat "$L/vlh/results.md" 2>/dev/null
  python3 scripts/bench_schedule.py | tee "$OUT/bench_schedule.txt"
}

part_after() {
  stamp "bench_after_profiling.py: a loop's speed before and after one profiling cycle"
  timeout "${AFTER_TIMEOUT:-240}" python3 scripts/bench_after_profiling.py --out "$L/ap" ${AP_ARGS:-} \
    > "$OUT/after_profiling.log" 2>&1
  echo "exit $?"
  cp "$L/ap/after_profiling.json" "$OUT/after_profiling.json" 2>/dev/null; cat "$L/ap/after_profiling.md" 2>/dev/null
}

part_integrations() {
  stamp "verdict_integrations.py: the Lightning and Hugging Face callbacks against their truth"
  # one GPU: on a host of several, Hugging Face's Trainer wraps the model in nn.DataParallel over all of them
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} timeout "${INTEGRATIONS_TIMEOUT:-240}" \
    python3 scripts/verdict_integrations.py --out "$L/vi" \
    > "$OUT/integrations.log" 2>&1
  echo "exit $?"
  cp "$L/vi/results.json" "$OUT/integrations.json" 2>/dev/null; cat "$L/vi/results.md" 2>/dev/null
}

part_nvml() {
  stamp "bench_nvml_busy.py: the driver's busy share against known duty cycles"
  timeout "${NVML_TIMEOUT:-120}" python3 scripts/bench_nvml_busy.py --out "$OUT/nvml_busy.json" 2>&1 | tee "$OUT/nvml_busy.log"
}

part_gaps() {
  stamp "bench_graph_gaps.py: a CUDA-graph replay's span against its kernels' time"
  timeout "${GAPS_TIMEOUT:-240}" python3 scripts/bench_graph_gaps.py --out "$OUT/graph_gaps.json" ${GAPS_ARGS:-} \
    2>&1 | tee "$OUT/graph_gaps.log"
}

verify_one() {  # NAME TRAIN_FLAGS...: a profiled ResNet-18 run, then stepscope verify on it
  local name=$1; shift
  stamp "verify: $name ($*)"
  timeout 200 python3 scripts/train.py --profile --arch resnet18 --batch-size 128 "$@" --logdir "$L/ver" \
    --run-name "$name" > "$OUT/verify_${name}_train.log" 2>&1; echo "exit $?"
  timeout 300 python3 scripts/verify.py "$L/ver/$name" --steps 200 > "$OUT/verify_$name.log" 2>&1; echo "exit $?"
  tail -4 "$OUT/verify_$name.log"
}

part_verify() {
  stamp "verify: eager ResNet-18 batch 128 (launch-bound), the remedy timed unprofiled"
  timeout 150 python3 scripts/train.py --profile --arch resnet18 --batch-size 128 --steps 200 --log-every 50 \
    --logdir "$L/ver" --run-name eager > "$OUT/verify_eager_train.log" 2>&1; echo "exit $?"
  timeout 200 python3 scripts/verify.py "$L/ver/eager" --steps 300 > "$OUT/verify_eager.log" 2>&1; echo "exit $?"
  tail -4 "$OUT/verify_eager.log"
  stamp "verify: a full-size CIFAR-format folder, --workers 0 --augment heavy (data-bound)"
  python3 scripts/make_cifar_folder.py "$L/cifar" --per-file 10000
  timeout 200 python3 scripts/train.py --profile --arch resnet18 --batch-size 128 --data cifar10 --data-dir "$L/cifar" \
    --workers 0 --augment heavy --steps 80 --log-every 20 --logdir "$L/ver" --run-name cifar \
    > "$OUT/verify_cifar_train.log" 2>&1; echo "exit $?"
  timeout 240 python3 scripts/verify.py "$L/ver/cifar" --steps 80 > "$OUT/verify_cifar.log" 2>&1; echo "exit $?"
  tail -4 "$OUT/verify_cifar.log"
  for r in eager cifar; do cp "$L/ver/$r/run.json" "$OUT/verify_$r.run.json" 2>/dev/null; done
  predictions_table verify_predictions.md eager cifar
}

part_verify_extra() {  # the other remedies, each on whatever verdict its run reads (VX_RUNS picks some)
  local runs=${VX_RUNS:-cifar_launch pageable logsync}
  for r in $runs; do
    case $r in
      cifar_launch)  # --compile reduce-overhead
        [ -d "$L/cifar" ] || python3 scripts/make_cifar_folder.py "$L/cifar" --per-file 10000
        verify_one cifar_launch --data cifar10 --data-dir "$L/cifar" --workers 8 --steps 120;;
      pageable) verify_one pageable --data-placement host --no-pin-memory --batch-size 512 --steps 200;;  # --pin-memory
      logsync) verify_one logsync --log-every 1 --steps 200;;  # --log-every 10
      *) echo "gpu_verify.sh: unknown VX_RUNS entry '$r' (cifar_launch pageable logsync)" >&2; continue;;
    esac
    cp "$L/ver/$r/run.json" "$OUT/verify_$r.run.json" 2>/dev/null
  done
  predictions_table verify_extra_predictions.md $runs
}

predictions_table() {  # FILE RUNS...: predicted vs measured speed-up of each run's verification
  local file=$1; shift
  stamp "verify: predicted vs measured"
  python3 - $(for r in "$@"; do echo "$OUT/verify_$r.run.json"; done) <<'PY' | tee "$OUT/$file"
import json, sys
print("| run | verdict | remedy | baseline ms | remedy ms | measured | predicted (range) | measured / predicted | result |")
print("|---|---|---|---:|---:|---:|---|---:|---|")
for path in sys.argv[1:]:
    try:
        v = json.load(open(path))["verification"]
    except (OSError, KeyError, ValueError) as e:
        print(f"| {path} | no verification ({type(e).__name__}) |"); continue
    lo, hi = v["predicted_speedup_range"]
    print(f"| {path.split('verify_')[-1].split('.')[0]} | {v['verdict']} | `{' '.join(v['remedy'])}` | "
          f"{v['baseline_step_ms']:.3f} | {v['remedy_step_ms']:.3f} | {v['measured_speedup']:.2f}x | "
          f"{v['predicted_speedup']:.2f}x ({lo:.2f}x..{hi:.2f}x) | {v['measured_speedup'] / v['predicted_speedup']:.2f} | "
          f"{v['result']} |")
PY
}

part_verdicts_ddp() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # KINDS.md: multicast off
  for case in comm straggler balanced; do
    stamp "verdict_ddp.py --case $case (NCCL, 2 GPUs)"
    timeout 150 torchrun --standalone --nproc_per_node 2 scripts/verdict_ddp.py --case $case \
      --out "$L/vb/traces/ddp_$case" > "$OUT/verdict_ddp_$case.log" 2>&1; echo "exit $?"; tail -1 "$OUT/verdict_ddp_$case.log"
  done
  (cd "$L/vb" && tar cf - traces | split -b 15M - "$OUT/verdict_ddp_traces.tar.")
}

part_ddp() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # KINDS.md: multicast off
  stamp "DDP CUDA tests (2 GPUs): graphed DDP vs eager DDP, train.py --cuda-graphs under torchrun"
  timeout 200 python3 -m pytest -q tests/test_ddp_cuda.py -p no:cacheprovider > "$OUT/ddp_tests.log" 2>&1
  graphs_ok=$?
  tail -5 "$OUT/ddp_tests.log"
  kinds="cuda-graphs eager"
  [ $graphs_ok -eq 0 ] || { kinds=eager; echo "graphed DDP tests failed: scaling runs for eager only"; }
  D=(--arch resnet18 --batch-size 128 --synthetic-train-size 131072 --synthetic-eval-size 1024 --log-every 50)
  TR=(torchrun --standalone --nproc_per_node 2 scripts/train.py)
  for rep in 1 2; do
    for kind in $kinds; do
      flags=$([ $kind = cuda-graphs ] && echo --cuda-graphs || true)
      stamp "scaling: $kind rep $rep"
      timeout 90 python3 scripts/train.py "${D[@]}" $flags --steps 400 --logdir "$L/ddp" \
        --run-name "$kind-1gpu-$rep" > "$OUT/ddp-$kind-1gpu-$rep.log" 2>&1 || echo "failed: $kind 1 GPU"
      timeout 120 "${TR[@]}" "${D[@]}" $flags --steps 400 --logdir "$L/ddp" \
        --run-name "$kind-2gpu-$rep" > "$OUT/ddp-$kind-2gpu-$rep.log" 2>&1 || echo "failed: $kind 2 GPUs"
    done
  done
  python3 scripts/ddp_scaling.py "$L/ddp" | tee "$OUT/ddp_scaling.txt"
  stamp "profiled NCCL run (eager, 2 GPUs) in the plugin's Distributed view"
  timeout 120 "${TR[@]}" "${D[@]}" --profile --steps 60 --logdir "$L/nccl" --run-name nccl \
    > "$OUT/nccl_profiled.log" 2>&1 || echo "failed: profiled NCCL run"
  timeout 150 python3 scripts/plugin_check.py "$L/nccl" nccl > "$OUT/nccl_plugin.json" 2> "$OUT/nccl_plugin.err"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['nccl']; print(d['views']); print(json.dumps(d.get('distributed', {}).get('commops_calls')))" "$OUT/nccl_plugin.json"
  (cd "$L/nccl" && tar czf "$OUT/nccl_run.tgz" --exclude='events.out.*' nccl) 2>/dev/null
  stamp "profiler overhead, 4 pairs side by side on the 2 GPUs"
  timeout 240 python3 scripts/profiler_overhead.py --concurrent --arch resnet18 --batch-size 128 --steps 1000 \
    --pairs 4 --logdir "$L" --name ovh2 > "$OUT/overhead_concurrent.log" 2>&1; echo "exit $?"
  cp "$L/ovh2/overhead.json" "$OUT/overhead_concurrent.json" 2>/dev/null; tail -8 "$OUT/overhead_concurrent.log"
}

part_compare() {
  stamp "compare.py: eager / compile reduce-overhead / cuda-graphs x native / custom; resnet18 bs128"
  timeout 330 python3 scripts/compare.py --arch resnet18 --batch-size 128 --steps 300 --logdir "$L" --name cmp \
    > "$OUT/compare.log" 2>&1; echo "exit $?"
  cp "$L"/cmp/compare.json "$L"/cmp/compare.md "$OUT/" 2>/dev/null; cat "$OUT/compare.md" 2>/dev/null \
    || tail -20 "$OUT/compare.log"
  for r in "$L"/cmp/*/; do [ -f "$r/diagnosis.md" ] && { echo "## $r"; cat "$r/diagnosis.md"; } >> "$OUT/diagnoses.md"; done
}

part_overhead() {
  stamp "profiler overhead: ${OVH_PAIRS:-6} alternating pairs of 600-step runs, with vs without --profile"
  timeout "${OVH_TIMEOUT:-420}" python3 scripts/profiler_overhead.py --arch resnet18 --batch-size 128 --steps 600 \
    --pairs "${OVH_PAIRS:-6}" --logdir "$L" --name ovh > "$OUT/overhead.log" 2>&1; echo "exit $?"
  cp "$L/ovh/overhead.json" "$OUT/" 2>/dev/null; tail -12 "$OUT/overhead.log"
  stamp "profiler overhead, --cuda-graphs: ${OVH_GRAPH_PAIRS:-3} pairs"
  timeout 120 python3 scripts/profiler_overhead.py --step-kind cuda-graphs --arch resnet18 --batch-size 128 \
    --steps 600 --pairs "${OVH_GRAPH_PAIRS:-3}" --logdir "$L" --name ovh-graphs > "$OUT/overhead_graphs.log" 2>&1; echo "exit $?"
  cp "$L/ovh-graphs/overhead.json" "$OUT/overhead_graphs.json" 2>/dev/null; tail -6 "$OUT/overhead_graphs.log"
}

part_plugin() {
  stamp "what the PyTorch Profiler tab shows for the eager runs (HTTP API)"
  if [ -d "$L/cmp" ]; then root="$L/cmp"; runs="eager-native eager-custom"; else root="$L/ovh"; runs="profiled-0"; fi
  timeout 120 python3 scripts/plugin_check.py "$root" $runs > "$OUT/plugin.json" 2> "$OUT/plugin.err"
  python3 - "$OUT/plugin.json" <<'EOF'
import json, sys
for run, r in json.load(open(sys.argv[1])).items():
    print(run, r["views"], {k: round(v) for k, v in r["overview_us_per_step"].items()},
          "op device us", r["operator_device_self_us"], "kernel us", r.get("kernel_total_us"))
EOF
  (cd "$root" && tar czf "$OUT/plugin_runs.tgz" --exclude='events.out.*' $runs) 2>/dev/null
}

part_tests() {
  stamp "CUDA tests"
  timeout "${TESTS_TIMEOUT:-420}" python3 -m pytest -q -rfE -m cuda tests -p no:cacheprovider > "$OUT/cuda_tests.log" 2>&1
  tail -12 "$OUT/cuda_tests.log"
}

part_bench() {
  stamp "scripts/bench_ops.py ${BENCH_ARGS:-}"
  timeout "${BENCH_TIMEOUT:-300}" python3 scripts/bench_ops.py ${BENCH_ARGS:-} --out "$OUT/bench_ops.json" --plot "$OUT/sweep.png" > "$OUT/bench_ops.log" 2>&1
  echo "exit $?"; tail -40 "$OUT/bench_ops.log"
}
part_ops() {
  for rep in 1 2 3; do
    stamp "bench_step_ops.py: native vs custom eager step, one process, interleaved (rep $rep)"
    timeout 120 python3 scripts/bench_step_ops.py --out "$OUT/step_ops_eager_$rep.json" 2>&1 | tail -1
  done
  stamp "bench_step_ops.py --compile reduce-overhead"
  timeout 240 python3 scripts/bench_step_ops.py --compile reduce-overhead --out "$OUT/step_ops_ro.json" 2>&1 | tail -1
  stamp "bench_ops.py --per-call: ours vs native per call, interleaved rounds"
  timeout 240 python3 scripts/bench_ops.py --per-call --out "$OUT/per_call.json" > "$OUT/per_call.log" 2>&1
  echo "exit $?"; grep -A12 "^per-call" "$OUT/per_call.log"
  for rep in $(seq "${OPS_REPS:-2}"); do
    for order in "native custom" "custom native"; do
      name="ops-$rep-${order// /-}"
      stamp "compare.py ${OPS_VARIANTS:-eager compile}, op sets in the order: $order"
      timeout 300 python3 scripts/compare.py --variants ${OPS_VARIANTS:-eager compile} --ops $order --arch resnet18 \
        --batch-size 128 --steps 300 --logdir "$L" --name "$name" > "$OUT/$name.log" 2>&1; echo "exit $?"
      cp "$L/$name/compare.json" "$OUT/$name.json" 2>/dev/null; cat "$L/$name/compare.md" 2>/dev/null || tail -5 "$OUT/$name.log"
    done
  done
}
part_ops_processes() {
  stamp "bench_ops_processes.py: ${OPP_PAIRS:-16} alternating native/custom train.py pairs, ${OPP_STEPS:-250} steps"
  timeout "${OPP_TIMEOUT:-480}" python3 scripts/bench_ops_processes.py --pairs "${OPP_PAIRS:-16}" --steps "${OPP_STEPS:-250}" \
    ${OPP_ARGS:-} --logdir "$L/opp" --out "$OUT/ops_processes.json" > "$OUT/ops_processes.log" 2>&1; echo "exit $?"
  cp "$L/opp/runs.jsonl" "$OUT/ops_processes_runs.jsonl" 2>/dev/null; tail -$(( ${OPP_PAIRS:-16} + 1 )) "$OUT/ops_processes.log"
}
part_calibrate() {
  for style in ${CAL_STYLES:-eager compiled lightning hf}; do
    stamp "calibrate_overhead.py --styles $style: predicted vs measured unprofiled step per family and recording"
    timeout "${CAL_TIMEOUT:-280}" python3 scripts/calibrate_overhead.py --out "$L/cal/$style" --styles "$style" \
      ${CAL_ARGS:-} > "$OUT/calibration_$style.md" 2> "$OUT/calibration_$style.log"; echo "exit $?"
    cp "$L/cal/$style/calibration.json" "$OUT/calibration_$style.json" 2>/dev/null
  done
  python3 scripts/calibrate_overhead.py --table "$OUT"/calibration_*.json | tee "$OUT/calibration.md"
}
part_memory() {
  stamp "verify_memory.py --parts peaks oom history: trace peaks vs max_memory_allocated; a real OOM; stacks' cost"
  timeout "${MEM_TIMEOUT:-420}" python3 scripts/verify_memory.py --out "$OUT/memory" --parts peaks oom history \
    ${MEM_ARGS:-} > "$OUT/memory.log" 2>&1; echo "exit $?"; grep -E "^(peaks|oom|history)" "$OUT/memory.log"
}
part_memory_extra() {
  stamp "verify_memory.py --parts boundary causes: predicted largest batch, injected causes (${MEM_REPS:-3} each way)"
  timeout "${MEMX_TIMEOUT:-540}" python3 scripts/verify_memory.py --out "$OUT/memory_extra" --parts boundary causes \
    --reps "${MEM_REPS:-3}" ${MEMX_ARGS:-} > "$OUT/memory_extra.log" 2>&1; echo "exit $?"
  grep -E "^(boundary|causes)" "$OUT/memory_extra.log"
  part_memory_verify
}
part_memory_verify() {
  stamp "stepscope verify --memory: a profiled resnet18 run re-run at its predicted batch and with expandable segments"
  timeout 150 python3 scripts/train.py --profile --arch resnet18 --batch-size 128 --steps 40 --log-every 10 \
    --device cuda --logdir "$L/mem" --run-name r > "$OUT/memory_verify_train.log" 2>&1; echo "exit $?"
  timeout 400 python3 scripts/verify.py "$L/mem/r" --memory --steps 40 > "$OUT/memory_verify.log" 2>&1; echo "exit $?"
  cat "$OUT/memory_verify.log"; python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))
    .get("memory_verification"), indent=1))' "$L/mem/r/run.json" > "$OUT/memory_verify.json" 2>/dev/null
}
part_memory_bisect() {
  stamp "verify_memory.py --parts bisect: predicted largest batch vs the out-of-memory boundary, per family"
  timeout $(( ${MEMB_BUDGET:-420} + 60 )) python3 scripts/verify_memory.py --out "$OUT/memory_bisect" --parts bisect \
    --bisect-budget "${MEMB_BUDGET:-420}" ${MEMB_ARGS:-} > "$OUT/memory_bisect.log" 2>&1; echo "exit $?"
  grep -E "^bisect" "$OUT/memory_bisect.log"
}
part_memory_predict() {
  stamp "verify_memory.py --parts predict: the prediction against the boundaries bisected before on this GPU model"
  timeout "${MEMP_TIMEOUT:-300}" python3 scripts/verify_memory.py --out "$OUT/memory_predict" --parts predict \
    ${MEMP_KEEP:+--keep "$L/predict_traces"} ${MEMP_ARGS:-} > "$OUT/memory_predict.log" 2>&1; echo "exit $?"
  grep -E "^predict" "$OUT/memory_predict.log"
  if [ -n "${MEMP_KEEP:-}" ]; then tar czf "$OUT/predict_traces.tgz" -C "$L" predict_traces && ls -la "$OUT/predict_traces.tgz"; fi
}
part_memory_ddp() {
  stamp "verify_memory.py --parts ddp_peaks: each DDP rank's trace peaks vs its max_memory_allocated (2 GPUs)"
  timeout "${MEMD_TIMEOUT:-360}" python3 scripts/verify_memory.py --out "$OUT/memory_ddp" --parts ddp_peaks \
    ${MEMD_ARGS:-} > "$OUT/memory_ddp.log" 2>&1; echo "exit $?"; grep -E "^ddp_peaks" "$OUT/memory_ddp.log"
}
part_capture() {  # the trainer on the shared capture stack, on CUDA: every extra, two cycles
  stamp "one capture stack: train.py --profile --repeat 2 with flame graph, memory timeline and Chrome trace"
  timeout 300 python3 scripts/train.py --profile --arch resnet18 --batch-size 128 --steps 200 --log-every 20 \
    --device cuda --repeat 2 --flamegraph --memory-timeline --export-chrome-trace --logdir "$L/capture" \
    --run-name r > "$OUT/capture_train.log" 2>&1; echo "exit $?"; tail -4 "$OUT/capture_train.log"
  (cd "$L/capture/r" && find . -type f | sort) > "$OUT/capture_files.txt"; cat "$OUT/capture_files.txt"
  cp "$L/capture/r/cycles.jsonl" "$OUT/capture_cycles.jsonl" 2>/dev/null
  cp "$L/capture/r/run.json" "$OUT/capture_run.json" 2>/dev/null
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_one_capture_stack.py tests/test_ddp_cuda.py \
    > "$OUT/capture_tests.log" 2>&1; tail -4 "$OUT/capture_tests.log"
}
for part in $PARTS; do "part_$part"; done
stamp "done"
