#!/usr/bin/env bash
# LFW rebuilt from its own published files and scored with insightface's released MobileFaceNet "y1"
# (insightface's model-zoo table: LFW 99.50). Not part of `make test`: it needs data that is not ours to ship.
#
#   scripts/lfw_y1.sh [--aligned] LFW_PHOTOS PAIRS_TXT Y1_PARAMS [WORK_DIR]
#
#   --aligned   LFW_PHOTOS are already 112x112 aligned faces: skip detection and alignment
#   LFW_PHOTOS  LFW's photo folder, <Name>/<Name>_0001.jpg (the 250x250 originals, lfw.tgz, the deep-funneled
#               set or the 150x150 thumbnails of LFW's site)
#   PAIRS_TXT   LFW's pairs.txt (first line "10 300")
#   Y1_PARAMS   model-y1-test2/model-0000.params from insightface's model-y1.zip (model-symbol.json beside it)
#   WORK_DIR    where the aligned faces, lfw.bin and the results go (default: lfw_y1)
#
# Steps: elasticface-align (detect 5 landmarks, warp to insightface's 112x112 template; its options go in
# ALIGN_ARGS, default --pick center: LFW's subject is the face in the middle of each photo),
# elasticface-convert pairs2bin (LFW's pairs.txt -> lfw.bin, LFW's 10 folds in their order), eval.py (flip
# fusion, 10-fold accuracy as insightface computes it). See docs/lfw.md.
set -euo pipefail

ALIGNED=0
if [ "${1:-}" = "--aligned" ]; then
    ALIGNED=1
    shift
fi
if [ $# -lt 3 ]; then
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
LFW_PHOTOS=$1
PAIRS_TXT=$2
Y1_PARAMS=$3
WORK_DIR=${4:-lfw_y1}
PYTHON=${PYTHON:-python}
REPO=$(cd "$(dirname "$0")/.." && pwd)

for path in "$LFW_PHOTOS" "$PAIRS_TXT" "$Y1_PARAMS" "$(dirname "$Y1_PARAMS")/model-symbol.json"; do
    if [ ! -e "$path" ]; then
        echo "lfw_y1.sh: $path not found" >&2
        exit 1
    fi
done
if ! command -v elasticface-align >/dev/null; then
    echo "lfw_y1.sh: elasticface-align is not installed; install this package (make install)" >&2
    exit 1
fi

mkdir -p "$WORK_DIR/bins"
if [ "$ALIGNED" = 1 ]; then
    FACES=$LFW_PHOTOS
else
    FACES=$WORK_DIR/aligned
    # resumable: faces already aligned are skipped
    # shellcheck disable=SC2086  # ALIGN_ARGS holds several options
    elasticface-align "$LFW_PHOTOS" "$FACES" ${ALIGN_ARGS:---pick center}
fi
elasticface-convert pairs2bin "$PAIRS_TXT" "$FACES" "$WORK_DIR/bins/lfw.bin"
"$PYTHON" "$REPO/eval.py" weights="$Y1_PARAMS" data.val_root="$WORK_DIR/bins" "data.val_sets=[lfw]" \
    hydra.run.dir="$WORK_DIR/eval"
echo "published (insightface model zoo, y1): LFW 99.50"
