#!/usr/bin/env bash
# posattn's GPU work on a machine that can fetch nothing (a GPU node without network, held for
# minutes at a time, its own torch/triton/transformers installed): bundle here, run there.
#
#   scripts/offline-gpu.sh bundle              here (network): offline/data.tar.xz (`posattn
#                                              data pack`) and offline/wheels (what such an
#                                              image lacks: omegaconf and its antlr runtime)
#   scripts/offline-gpu.sh check OUT           there: GPU kernel tests, then `posattn bench`
#                                              with sdpa, flex and triton side by side
#   scripts/offline-gpu.sh start NAME ARGS...  there: `python -m posattn ARGS --output
#                                              $RUNS/NAME` in the background, detached
#   scripts/offline-gpu.sh wait SECONDS OUT    there: until the started runs end or SECONDS
#                                              pass; their small outputs to OUT/runs.tar.gz
#
# Run from the repository root. Commands "there" unpack the bundle on first use into
# $POSATTN_DATA_DIR (default /tmp/posattn-data) and install the wheels into /tmp/posattn-site;
# runs live in $RUNS (default /tmp/posattn-runs) and resume there while the machine is kept.
set -euo pipefail

# Here the project's virtual environment (make's .venv); there the image's python3.
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
BUNDLE=${BUNDLE:-offline}
RUNS=${RUNS:-/tmp/posattn-runs}
SITE=/tmp/posattn-site
export POSATTN_DATA_DIR=${POSATTN_DATA_DIR:-/tmp/posattn-data}
# Pure-Python packages posattn needs beyond a CUDA image with torch, transformers and friends.
WHEELS=("omegaconf==2.3.0" "antlr4-python3-runtime==4.9.3" "rdata>=1.0" "parameterized>=0.9")

bundle() {
    mkdir -p "$BUNDLE/wheels"
    "$PYTHON" -m posattn data pack "$BUNDLE/data.tar.xz"
    # antlr4's runtime ships as a source archive only: build its (pure-Python) wheel here.
    "$PYTHON" -m pip wheel -q --no-deps -w "$BUNDLE/wheels" "${WHEELS[@]}"
    du -sh "$BUNDLE"
}

setup() {
    if [ ! -f "$SITE/.installed" ]; then
        "$PYTHON" -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
            --target "$SITE" "$BUNDLE"/wheels/*.whl
        touch "$SITE/.installed"
    fi
    export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
    [ -f "$POSATTN_DATA_DIR/manifest.json" ] ||
        "$PYTHON" -m posattn data unpack "$BUNDLE/data.tar.xz"
    mkdir -p "$RUNS"
}

check() {
    local out=$1
    setup
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
    "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_gpu_kernels.py \
        tests/test_triton_kernel.py 2>&1 | tee "$out/gpu-tests.log" | tail -n 15
    "$PYTHON" -m posattn bench --kernels sdpa,flex,triton --lengths 1024,4096,8192 \
        --encodings t5,diet-rel,tupe-r,kerple,alibi,diet-abs --model-lengths 512,2048 \
        --long-lengths '' --output "$RUNS/bench" 2>&1 | tail -n 60
    cp "$RUNS"/bench/bench.* "$RUNS"/bench/*.png "$out"/
}

start() {
    local name=$1
    shift
    setup
    # setsid: the run outlives the command that started it, as long as the machine is kept.
    setsid nohup "$PYTHON" -m posattn "$@" --output "$RUNS/$name" \
        >"$RUNS/$name.log" 2>&1 </dev/null &
    echo $! >"$RUNS/$name.pid"
    echo "started $name (pid $!): posattn $* --output $RUNS/$name"
}

running() {
    local pid
    for pid in "$RUNS"/*.pid; do
        [ -e "$pid" ] && kill -0 "$(cat "$pid")" 2>/dev/null && return 0
    done
    return 1
}

wait_runs() {
    local seconds=$1 out=$2 waited=0
    mkdir -p "$out"
    while running && [ "$waited" -lt "$seconds" ]; do
        sleep 10
        waited=$((waited + 10))
    done
    for log in "$RUNS"/*.log; do
        [ -e "$log" ] && { echo "== $log"; tail -c 600 "$log" | tr '\r' '\n' | tail -n 4; }
    done
    # Results, metrics, configs, logs and figures; never checkpoints or weights.
    (cd "$RUNS" && find . \( -name '*.json' -o -name '*.md' -o -name '*.log' -o -name '*.png' \
        -o -name '*.yaml' \) -not -path '*/checkpoints/*' -print0 |
        tar czf "$out/runs.tar.gz" --null -T -)
    running && echo "still running after ${waited}s" || echo "no run left running"
}

case ${1:-} in
bundle) bundle ;;
check) check "${2:?OUT}" ;;
start) start "${2:?NAME}" "${@:3}" ;;
wait) setup && wait_runs "${2:?SECONDS}" "${3:?OUT}" ;;
*)
    sed -n '2,18p' "$0"
    exit 2
    ;;
esac
