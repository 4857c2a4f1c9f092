#!/usr/bin/env bash
# Issue 71's measurements in one call on a lent GPU, most important first, each part started only while the call's
# time allows it (docs/speed.md, "GPU suite"). Items 1, 2 and 4 of the issue:
#   1. profile        iresnet100 batch 256, full class layer: the row (first run of a process that compiles from
#                     nothing), its profile in the same fit (kernels, busy share, the host's work by source, no Python
#                     stacks), the same row run again in that process, its FLOPs (MFU)
#   2. switches       each in a process of its own, first run counted: the baseline, CUDA graphs
#                     (model.compile_mode=reduce-overhead, profiled: item 2), gc frozen, cudnn.benchmark off, the
#                     expandable allocator, gc off, a long warm-up, a second run; given the time left after item 4's
#                     reserve (RESERVE): with the estimates below, the baseline and CUDA graphs in a 540 s call
#   3. suite_train_size + train_path   the path users run (train.py as typed on a RecordIO written here, validated
#                     and checkpointed each epoch) against the suite's row at its class count (item 4)
#   4. cuda_graph_tests, gpu_tests     the gpu-marked tests: the CUDA-graph path's, then the others
#   5. probe, speed_class_layer, speed_channels_last   if time is left
# Each part's "needs" (seconds) is an estimate from the H200 calls of 2026-11-28 (commit 281c29e): the first process
# compiles iresnet100 from nothing (about 165 s); later ones find inductor's cache in /tmp (a process of the pfc pair
# took about 60 s). Every measuring process's time is in its result (process_seconds): the next call's estimates.
#
#   bash benchmarks/gpu_suite/call.sh OUT_DIR [ARCFACE_TORCH_DIR] [SECONDS]     (a GPU; SECONDS default 540)
#   PARTS="profile switches" bash benchmarks/gpu_suite/call.sh ...             (only those parts, in this order)
#   TINY=1 bash benchmarks/gpu_suite/call.sh OUT_DIR                           (tiny sizes on a CPU: the tests)
# Every log and figure goes to OUT_DIR (profile.json, switches.json, train_path.json, *.log, jobs.tar.gz: each
# measurement's job.json, result.json and log).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT=${1:?usage: call.sh OUT_DIR [ARCFACE_TORCH_DIR] [SECONDS]}
AT=${2:-}
BUDGET=${3:-540}
PYTHON=${PYTHON:-python3}
SUITE="$ROOT/benchmarks/gpu_suite/run.sh"
export PYTHON PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 WANDB_MODE=offline
mkdir -p "$OUT"
JOBS=$(mktemp -d)
START=$SECONDS
# each measurement's job, result and log, also when the call is stopped (the device tool's limit, `timeout`)
pack() {
    tar -czf "$OUT/jobs.tar.gz" -C "$JOBS" --exclude='*.ckpt' --exclude='*.rec' --exclude='faces' \
        --exclude='val_faces' --exclude='*.bin' . 2>/dev/null
    rm -rf "$JOBS"
}
trap 'echo "call: stopped after $((SECONDS - START)) s"; pack; exit 124' TERM INT

# part NAME SECONDS_IT_NEEDS COMMAND...: runs COMMAND (output to OUT/NAME.log and the console) if that many
# seconds are left of the budget, else says it was left out
PARTS=${PARTS:-profile switches suite_train_size train_path cuda_graph_tests gpu_tests probe speed_class_layer \
speed_channels_last}
left() { echo $((BUDGET - (SECONDS - START))); }
part() {
    local name=$1 needs=$2
    shift 2
    case " $PARTS " in *" $name "*) ;; *) return 0;; esac
    if [ "$(left)" -lt "$needs" ]; then
        echo "== $name: left out ($(left) s of the budget left, it needs about $needs s)"
        return 0
    fi
    echo "== $name ($((SECONDS - START)) s into the call)"
    "$@" 2>&1 | tee "$OUT/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - START)) s"
}
# what item 4 and the CUDA-graph tests need after the switches (suite_train_size 60 + train_path 150)
RESERVE=${RESERVE:-210}
in_parts() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
reserve() { local r=0; in_parts suite_train_size && r=$((r + 60)); in_parts train_path && r=$((r + 150)); \
    [ "$r" -lt "$RESERVE" ] && echo "$r" || echo "$RESERVE"; }

if [ -n "${TINY:-}" ]; then
    SIZE=(--device cpu --backbones tiny --batches 8 --full-classes 16 --pfc-classes 0 --layers full --warmup 1
          --steps 1 --profile-steps 1 --compile-backend eager)
    TRAIN=(--device cpu --backbone tiny --batch 8 --steps-per-epoch 4 --epochs 3 --identities 4 --val-identities 20)
    TRAIN_OVERRIDES=(trainer.precision=32-true model.compile=true model.compile_backend=eager)
    CLASSES=4
    PFC=64
    PROCESS=5  # seconds a tiny measuring process takes on a CPU (the switches' smallest budget)
else
    SIZE=(--backbones iresnet100 --batches 256 --pfc-classes 0 --layers full --profile-steps 3)
    TRAIN=(--backbone iresnet100 --batch 256 --steps-per-epoch 50 --epochs 3)
    TRAIN_OVERRIDES=()
    CLASSES=800  # train_path.py's identities: 256 x 50 images, 16 each
    PFC=2000000
    PROCESS=60
fi
AT_ARGS=()
[ -n "$AT" ] && AT_ARGS=(--arcface-torch "$AT")

# 1: where the step's time goes (no arcface_torch side: its figures are in docs/speed.md)
part profile 200 bash "$SUITE" "${SIZE[@]}" --parts steps,profile --no-stacks --second-run \
    --json "$OUT/profile.json" --keep "$JOBS/profile"
# 1 and 2: the switches, as many as the time left after item 4's reserve allows
SWITCH_SECONDS=$(($(left) - $(reserve)))
part switches "$((PROCESS + $(reserve)))" bash "$SUITE" "${SIZE[@]}" --parts switches --no-stacks \
    --seconds "$SWITCH_SECONDS" --json "$OUT/switches.json" --keep "$JOBS/switches"
# 4: the path users run, against the suite's row at its class count
part suite_train_size 60 bash "$SUITE" "${SIZE[@]}" --full-classes "$CLASSES" --parts steps \
    --json "$OUT/suite_train_size.json" --keep "$JOBS/suite_train_size"
part train_path 150 bash "$SUITE" train-path "${TRAIN[@]}" \
    --suite-json "$OUT/suite_train_size.json" --work "$JOBS/train_path" --json "$OUT/train_path.json" \
    "${TRAIN_OVERRIDES[@]}"
if [ -z "${TINY:-}" ]; then
    part cuda_graph_tests 120 "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider "$ROOT/tests/test_compile_mode.py"
    part gpu_tests 45 "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider "$ROOT/tests/test_align_detector.py" \
        "$ROOT/tests/test_recordio.py"
fi
part probe 60 "$PYTHON" "$ROOT/benchmarks/compile_fallback_probe.py"
# the class layer's launches: Partial FC's 200,000 sampled rows are 25 chunks of 8,192 (a CPU's measured size),
# each a few small kernels the host may launch slower than the GPU runs them; the dense path is one product
part speed_class_layer 150 bash "$SUITE" "${SIZE[@]}" --pfc-classes "$PFC" --layers full,pfc --parts speed \
    --speed-layers full,pfc --settings "dense class layer,chunk_size 32768" --json "$OUT/speed_class_layer.json" \
    --keep "$JOBS/speed_class_layer"
# compiled NHWC against compiled NCHW: a graph of its own, compiled from nothing (minutes)
part speed_channels_last 200 bash "$SUITE" "${SIZE[@]}" --parts speed --settings channels_last \
    --json "$OUT/speed_channels_last.json" --keep "$JOBS/speed_channels_last"
pack
trap - TERM INT
echo "call: done in $((SECONDS - START)) s"
