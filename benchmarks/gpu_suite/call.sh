#!/usr/bin/env bash
# Issue 61's measurements in one call on a lent GPU, most important first, each part started only while the
# call's time allows it (docs/speed.md, "GPU suite"):
#   1. iresnet100 batch 256, both class layers, both sides, each in its own process (steps and FLOPs only)
#   2. their profiles (kernels and busy share without Python stacks, then where the host waits, with them)
#   3. the path users run (run.sh train-path) against the suite's row at its own class count
#   4. the gpu-marked tests
#   5. whether this torch falls back to eager after a call under a TorchDispatchMode (compile_fallback_probe.py;
#      torch 2.11.0+cu130 does, measured 2026-11-28)
#   6. the speed rows, if time is left: the class layer's paths at both layers, then compiled NHWC against NCHW
# Each part's "needs" is what it took on an H200 (2026-11-28, commit 281c29e): the suite's first template process
# compiles iresnet100 from nothing (about 160 s); later processes reuse inductor's cache in /tmp.
#
#   bash benchmarks/gpu_suite/call.sh OUT_DIR [ARCFACE_TORCH_DIR] [SECONDS]        (a GPU; SECONDS default 540)
#   PARTS="suite gpu_tests" bash benchmarks/gpu_suite/call.sh ...                  (only those parts, in this order)
#   TINY=1 bash benchmarks/gpu_suite/call.sh OUT_DIR                               (tiny sizes on a CPU: the tests)
# Every log and figure goes to OUT_DIR (suite.json, profile.json, train_path.json, *.log, jobs.tar.gz: each
# measurement's job.json, result.json and log).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT=${1:?usage: call.sh OUT_DIR [ARCFACE_TORCH_DIR] [SECONDS]}
AT=${2:-}
BUDGET=${3:-540}
PYTHON=${PYTHON:-python3}
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
trap 'echo "gpu_call: stopped after $((SECONDS - START)) s"; pack; exit 124' TERM INT

# part NAME SECONDS_IT_NEEDS COMMAND...: runs COMMAND (output to OUT/NAME.log and the console) if that many
# seconds are left of the budget, else says it was left out
PARTS=${PARTS:-suite profile suite_train_size train_path gpu_tests probe speed_class_layer speed_channels_last}
part() {
    local name=$1 needs=$2
    shift 2
    case " $PARTS " in *" $name "*) ;; *) return 0;; esac
    local left=$((BUDGET - (SECONDS - START)))
    if [ "$left" -lt "$needs" ]; then
        echo "== $name: left out ($left s of the budget left, it needs about $needs s)"
        return 0
    fi
    echo "== $name ($((SECONDS - START)) s into the call)"
    "$@" 2>&1 | tee "$OUT/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - START)) s"
}

if [ -n "${TINY:-}" ]; then
    SIZE=(--device cpu --backbones tiny --batches 8 --full-classes 16 --pfc-classes 64 --warmup 1 --steps 1
          --profile-steps 1 --compile-backend eager)
    TRAIN=(--device cpu --backbone tiny --batch 8 --steps-per-epoch 4 --epochs 3 --identities 4 --val-identities 20)
    TRAIN_OVERRIDES=(trainer.precision=32-true model.compile=true model.compile_backend=eager)
    CLASSES=4
else
    SIZE=(--backbones iresnet100 --batches 256)
    TRAIN=(--backbone iresnet100 --batch 256 --steps-per-epoch 50 --epochs 3)
    TRAIN_OVERRIDES=()
    CLASSES=800  # train_path.py's identities: 256 x 50 images, 16 each
fi
AT_ARGS=()
[ -n "$AT" ] && AT_ARGS=(--arcface-torch "$AT")

part suite 60 bash "$ROOT/benchmarks/gpu_suite/run.sh" "${SIZE[@]}" "${AT_ARGS[@]}" --parts steps \
    --json "$OUT/suite.json" --keep "$JOBS/suite"
part profile 120 bash "$ROOT/benchmarks/gpu_suite/run.sh" "${SIZE[@]}" "${AT_ARGS[@]}" --parts profile \
    --json "$OUT/profile.json" --keep "$JOBS/profile"
part suite_train_size 60 bash "$ROOT/benchmarks/gpu_suite/run.sh" "${SIZE[@]}" --full-classes "$CLASSES" --layers full \
    --pfc-classes 0 --parts steps --json "$OUT/suite_train_size.json" --keep "$JOBS/suite_train_size"
part train_path 150 bash "$ROOT/benchmarks/gpu_suite/run.sh" train-path "${TRAIN[@]}" \
    --suite-json "$OUT/suite_train_size.json" --work "$JOBS/train_path" --json "$OUT/train_path.json" \
    "${TRAIN_OVERRIDES[@]}"
if [ -z "${TINY:-}" ]; then
    part gpu_tests 45 "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider "$ROOT/tests/test_align_detector.py" \
        "$ROOT/tests/test_recordio.py"
fi
part probe 60 "$PYTHON" "$ROOT/benchmarks/compile_fallback_probe.py"
# the class layer's launches: Partial FC's 200,000 sampled rows are 25 chunks of 8,192 (a CPU's measured size),
# each a few small kernels the host may launch slower than the GPU runs them; the dense path is one product
part speed_class_layer 150 bash "$ROOT/benchmarks/gpu_suite/run.sh" "${SIZE[@]}" --parts speed --speed-layers full,pfc \
    --settings "dense class layer,chunk_size 32768" --json "$OUT/speed_class_layer.json" \
    --keep "$JOBS/speed_class_layer"
# compiled NHWC against compiled NCHW: a graph of its own, compiled from nothing (minutes)
part speed_channels_last 200 bash "$ROOT/benchmarks/gpu_suite/run.sh" "${SIZE[@]}" --parts speed --speed-layers full \
    --settings channels_last --json "$OUT/speed_channels_last.json" --keep "$JOBS/speed_channels_last"
pack
trap - TERM INT
echo "gpu_call: done in $((SECONDS - START)) s"
