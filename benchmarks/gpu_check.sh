#!/usr/bin/env bash
# GPU check for readtrace fix (issue 5), in ONE run on a borrowed GPU machine, under 5 minutes:
# the CUDA tests of the loader and the shim, then the CUDA part of benchmarks/bench_loader.py.
#
# Here, once (fetches the few wheels the GPU machine may lack into .whl/, gitignored, ~5 MB):
#     benchmarks/gpu_check.sh --fetch-wheels
# There (device tool: carry [".whl"], timeout_s 420):
#     bash benchmarks/gpu_check.sh
# Results land in $OUT (or ./gpu-check-out): gpu_check.log, pytest.txt, bench_loader_cuda.json, summary.txt.
# Tunables: GPU_CHECK_SIZE_MIB (default 2048), GPU_CHECK_REPEAT (3), GPU_CHECK_DIR (a disk dir, /var/tmp),
# GPU_CHECK_THREADS (own-fd reader thread counts to compare, e.g. "8 16").
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=.whl
NEEDED=(safetensors pytest hypothesis rich)
PEERS=(fastsafetensors runai-model-streamer)

if [ "${1:-}" = "--fetch-wheels" ]; then
    PY=${PYTHON:-.venv/bin/python}
    mkdir -p "$WHEELS"
    for v in 3.10 3.11 3.12; do
        "$PY" -m pip download -q -d "$WHEELS" --only-binary=:all: --python-version "$v" \
            --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
            "safetensors>=0.4.3,<0.9" "pytest>=8,<10" "hypothesis>=6.100,<7" "rich>=13,<16" \
            fastsafetensors runai-model-streamer --no-deps || echo "some wheels for $v missing"
        "$PY" -m pip download -q -d "$WHEELS" --only-binary=:all: --python-version "$v" \
            --platform manylinux2014_x86_64 iniconfig pluggy packaging attrs sortedcontainers \
            markdown-it-py mdurl pygments typing_extensions exceptiongroup tomli --no-deps || true
    done
    du -sh "$WHEELS"; exit 0
fi

OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
exec > >(tee "$LOG") 2>&1
started=$(date +%s)
PY=$(command -v python3 || command -v python)
echo "== python: $PY ($($PY -V 2>&1)); $(nproc) CPUs; $(free -g | awk '/Mem:/{print $2}') GiB"
nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current \
    --format=csv 2>&1 | head -3
if ! $PY -c "import torch; print(torch.__version__, torch.cuda.is_available())"; then
    echo "FATAL: torch is not importable here; readtrace's CUDA path cannot be checked" | tee "$OUT/summary.txt"
    exit 3
fi

install_missing() {  # from the carried wheel dir only: the machine has no network
    local missing=()
    for pkg in "$@"; do
        $PY -c "import ${pkg//-/_}" 2>/dev/null || missing+=("$pkg")
    done
    [ ${#missing[@]} = 0 ] && return 0
    echo "== installing from $WHEELS: ${missing[*]}"
    if [ -d "$WHEELS" ]; then
        # retry for an "externally managed" system Python
        $PY -m pip install -q --no-index --find-links "$WHEELS" "${missing[@]}" 2>&1 | tail -3 ||
            $PY -m pip install -q --no-index --find-links "$WHEELS" --break-system-packages "${missing[@]}" \
                2>&1 | tail -3
    else
        echo "no $WHEELS dir carried: cannot install ${missing[*]}"
    fi
}
install_missing "${NEEDED[@]}"
install_missing "${PEERS[@]}" || true
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

echo "== CUDA tests ($(( $(date +%s) - started )) s)"
$PY -m pytest -q -rs -p no:cacheprovider tests/loader/test_loader.py tests/inject/test_shim.py tests/loader/test_staging_pool.py \
    tests/test_workloads.py -m "cuda or not slow" \
    2>&1 | tee "$OUT/pytest.txt" | tail -25
tests_rc=${PIPESTATUS[0]}

echo "== CUDA benchmark ($(( $(date +%s) - started )) s)"
$PY benchmarks/bench_loader.py --device cuda --size-mib "${GPU_CHECK_SIZE_MIB:-2048}" \
    --repeat "${GPU_CHECK_REPEAT:-3}" ${GPU_CHECK_THREADS:+--threads $GPU_CHECK_THREADS} --dir "${GPU_CHECK_DIR:-/var/tmp}" --out "$OUT/bench_loader_cuda.json"
bench_rc=$?

{
    echo "tests rc=$tests_rc ($(grep -E 'passed|failed' "$OUT/pytest.txt" | tail -1))"
    echo "bench rc=$bench_rc"
    echo "total $(( $(date +%s) - started )) s"
} | tee "$OUT/summary.txt"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
