#!/usr/bin/env bash
# GPU check for readtrace (issues 5 and 29), in ONE run on a borrowed GPU machine, about 6 minutes:
# the CUDA tests of the loader and the shim; where a warm load's time goes (benchmarks/gpu_paths.py);
# readtrace's loader against its peers and the limits, cold and warm (benchmarks/bench_loader.py, 2 GiB
# and GPU_CHECK_BIG_MIB); fix --compare --device cuda on the 2 GiB checkpoint, and its tensors against
# the CPU load and safetensors' own CUDA load.
#
# Here, once (fetches the wheels the GPU machine lacks into .whl/, gitignored, ~3.5 MB):
#     benchmarks/gpu_check.sh --fetch-wheels
# There (device tool: carry [".whl"], timeout_s 540):
#     bash benchmarks/gpu_check.sh
# Results land in $OUT (or ./gpu-check-out), at most 8 files: gpu_check.log, pytest.txt, gpu_paths.json,
# bench_2g.json, bench_big.json, fix_cuda.json, identity.txt, summary.txt.
# Tunables: GPU_CHECK_SIZE_MIB (2048), GPU_CHECK_BIG_MIB (8192; 0 skips), GPU_CHECK_REPEAT (3),
# GPU_CHECK_DIR (a disk dir, /var/tmp), GPU_CHECK_STEPS (default "tests paths fix bench big"),
# GPU_CHECK_PYTEST_MARK ("cuda or not slow"; "cuda" runs only the tests that need the GPU),
# GPU_CHECK_PATHS_ARGS (more arguments for gpu_paths.py, e.g. "--groups cached loader --repeat 5").
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=.whl
PEERS=(fastsafetensors runai-model-streamer)

if [ "${1:-}" = "--fetch-wheels" ]; then  # the GPU machine's image has Python 3.12 with torch, pytest, rich
    PY=${PYTHON:-.venv/bin/python}
    mkdir -p "$WHEELS"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$WHEELS" "fastsafetensors>=0.1,<1" "runai-model-streamer>=0.15,<1"
    du -sh "$WHEELS"; exit 0
fi

OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
started=$(date +%s)
STEPS=${GPU_CHECK_STEPS:-tests paths fix bench big}
DIR=${GPU_CHECK_DIR:-/var/tmp}/readtrace-gpu-check
SIZE=${GPU_CHECK_SIZE_MIB:-2048}
BIG=${GPU_CHECK_BIG_MIB:-8192}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=$(command -v python3 || command -v python)
elapsed() { echo "$(( $(date +%s) - started )) s"; }
step() { [[ " $STEPS " == *" $1 "* ]]; }
echo "== python: $PY ($($PY -V 2>&1)); $(nproc) CPUs; $(free -g | awk '/Mem:/{print $2}') GiB; $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max \
    --format=csv 2>&1 | head -3
if ! $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"; then
    echo "FATAL: torch is not importable here; readtrace's CUDA path cannot be checked" | tee "$OUT/summary.txt"
    exit 3
fi
if [ -d "$WHEELS" ]; then  # the peers, from the carried wheels only: the machine has no network
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-check-site "$WHEELS"/*.whl 2>&1 | tail -2
    export PYTHONPATH=$PYTHONPATH:/tmp/gpu-check-site
fi
# fastsafetensors dlopens "libcudart.so": point it at the very library torch loaded
cudart=$($PY -c "import torch, re; print(next((l.split()[-1] for l in open('/proc/self/maps') if re.search(r'libcudart\.so', l)), ''))" 2>/dev/null)
if [ -n "$cudart" ]; then mkdir -p /tmp/gpu-check-lib && ln -sf "$cudart" /tmp/gpu-check-lib/libcudart.so &&
    export LD_LIBRARY_PATH=/tmp/gpu-check-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
echo "== cudart: ${cudart:-not found}"
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
CKPT=$DIR/model-${SIZE}m.safetensors
$PY -c "import sys; from benchmarks.bench_loader import make_checkpoint; make_checkpoint(sys.argv[1], int(sys.argv[2]) << 20)" \
    "$CKPT" "$SIZE"
echo "== checkpoint $CKPT: $(du -h "$CKPT" | cut -f1) ($(elapsed))"
tests_rc=-; paths_rc=-; bench_rc=-; fix_rc=-; ident_rc=-; big_rc=-

if step tests; then
    echo "== CUDA tests ($(elapsed))"
    timeout 150 $PY -m pytest -q -rs -p no:cacheprovider tests/loader/test_loader.py tests/loader/test_devicecopy.py \
        tests/inject/test_shim.py tests/loader/test_staging_pool.py tests/test_workloads.py -m "${GPU_CHECK_PYTEST_MARK:-cuda or not slow}" \
        > "$OUT/pytest.txt" 2>&1
    tests_rc=$?; tail -25 "$OUT/pytest.txt"
fi
if step paths; then
    echo "== where a warm load's time goes ($(elapsed))"
    timeout 120 $PY benchmarks/gpu_paths.py --checkpoint "$CKPT" --out "$OUT/gpu_paths.json" ${GPU_CHECK_PATHS_ARGS:-}
    paths_rc=$?
fi
if step fix; then
    echo "== fix --compare --device cuda ($(elapsed))"
    timeout 100 $PY -m readtrace fix --compare --no-record --strategy own-fd --device cuda --json \
        -- "$PY" -m readtrace.workloads.load --pattern safetensors-default "$CKPT" > "$OUT/fix_cuda.json"
    fix_rc=$?
    $PY -c "import json, sys; d = json.load(open(sys.argv[1])); print({k: d.get(k) for k in
        ('verdict', 'change', 'exit_code', 'speedup', 'tensors', 'tensors_identical', 'differing_tensors')})" \
        "$OUT/fix_cuda.json"
    timeout 60 $PY - "$CKPT" > "$OUT/identity.txt" 2>&1 <<'PY'
import sys, torch
from safetensors.torch import load_file as st_load
from readtrace.inject.manifest import raw_bytes
from readtrace.loader.loader import load_file
path = sys.argv[1]
cpu, ours, theirs = st_load(path), load_file(path, "cuda"), st_load(path, device="cuda")
registered = load_file(path, "cuda", register_cached=True)
bad = [n for n in cpu for other in (ours, theirs, registered)
       if other[n].dtype != cpu[n].dtype or other[n].shape != cpu[n].shape
       or not torch.equal(raw_bytes(other[n].cpu()), raw_bytes(cpu[n]))]
print(f"{len(cpu)} tensors: readtrace cuda (staging, registered pages) and safetensors cuda vs the CPU load:",
      "identical" if not bad else f"DIFFERENT: {sorted(set(bad))}")
sys.exit(1 if bad else 0)
PY
    ident_rc=$?; cat "$OUT/identity.txt"
fi
if step bench; then
    echo "== loaders, cold and warm, ${SIZE} MiB ($(elapsed))"
    timeout 150 $PY benchmarks/bench_loader.py --device cuda --checkpoint "$CKPT" --repeat "${GPU_CHECK_REPEAT:-3}" \
        --out "$OUT/bench_2g.json"; bench_rc=$?
fi
if step big && [ "$BIG" -gt 0 ]; then
    echo "== loaders, cold and warm, ${BIG} MiB ($(elapsed))"
    rm -f "$CKPT"
    timeout 200 $PY benchmarks/bench_loader.py --device cuda --size-mib "$BIG" --dir "$DIR" --repeat 1 \
        --only dd "own-fd x16" safetensors fastsafetensors runai pinned --out "$OUT/bench_big.json"; big_rc=$?
fi
{
    echo "tests rc=$tests_rc ($(grep -E 'passed|failed' "$OUT/pytest.txt" 2>/dev/null | tail -1))"
    echo "paths rc=$paths_rc bench rc=$bench_rc fix rc=$fix_rc identity rc=$ident_rc big rc=$big_rc"
    echo "total $(elapsed)"
} | tee "$OUT/summary.txt"
[ "$tests_rc" = 0 ] && [ "$ident_rc" = 0 ]
