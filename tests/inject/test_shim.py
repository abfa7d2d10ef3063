"""The shim routes an unchanged script's safetensors loads, and both runs record identical manifests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from readtrace.errors import ReadtraceError
from readtrace.inject.manifest import compare_manifests, fill_digests, read_manifest, tensor_digest
from readtrace.rerun.environment import shim_environment

# An ordinary user script: knows nothing of readtrace.
SCRIPT = """
import sys
import safetensors.torch
from safetensors import safe_open

state = safetensors.torch.load_file(sys.argv[1])
storages = len({t.untyped_storage().data_ptr() for t in state.values() if t.numel()})
with safe_open(sys.argv[2], framework="pt") as f:
    names = list(f.keys())
    first = f.get_tensor(names[0])
    part = f.get_slice(names[1])[1:3]
    meta = f.metadata()
try:
    safetensors.torch.load_file(sys.argv[3])
    bad = "loaded"
except Exception as e:
    bad = type(e).__name__
print(f"storages={storages} names={names} first={first.shape} part={tuple(part.shape)} meta={meta} bad={bad}")
"""


@pytest.fixture
def workload(tmp_path):
    torch.manual_seed(0)
    a = {"w1": torch.randn(256, 64), "b1": torch.randn(64).to(torch.bfloat16), "s": torch.tensor(7),
         "mask": torch.ones(5, dtype=torch.bool), "empty": torch.zeros(0, 3)}
    b = {"emb": torch.randn(10, 4), "head": torch.randn(6, 4).half()}
    save_file(a, tmp_path / "a.safetensors")
    save_file(b, tmp_path / "b.safetensors", metadata={"format": "pt"})
    (tmp_path / "bad.safetensors").write_bytes(b"\x05" + bytes(7) + b"{oops")
    (tmp_path / "load.py").write_text(SCRIPT)
    return tmp_path


def run_script(workload, strategy: str, *, base_env=None):
    manifest = workload / f"manifest-{strategy}.jsonl"
    args = [sys.executable, str(workload / "load.py")] + [
        str(workload / n) for n in ("a.safetensors", "b.safetensors", "bad.safetensors")]
    with shim_environment(strategy, manifest, base_env=base_env) as env:
        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = read_manifest(manifest)
    fill_digests(loaded)
    return out.stdout.strip(), loaded


def test_own_fd_run_loads_identical_tensors_through_the_loader(workload):
    base_out, base = run_script(workload, "none")
    fixed_out, fixed = run_script(workload, "both")
    # The script sees the same names, shapes, metadata and error; only storage sharing differs:
    # the own-fd loader reads the data section into one allocation.
    assert "storages=4 " in base_out and "storages=1 " in fixed_out
    assert base_out.split(" ", 1)[1] == fixed_out.split(" ", 1)[1]
    assert "bad=SafetensorError" in fixed_out  # a broken file fails exactly as without the shim
    diff = compare_manifests(base, fixed)
    assert diff.all_identical and diff.count == 5 + 1 + 1 == diff.identical
    names = sorted(t.name for t in fixed.tensors)
    assert names == ["b1", "emb", "empty", "head[1:3]", "mask", "s", "w1"]
    calls = {(os.path.basename(c.file), c.call): c for c in fixed.calls}
    assert calls["a.safetensors", "load_file"].strategy == "both"
    assert calls["a.safetensors", "load_file"].fallback is None
    assert "not a valid safetensors file" in calls["bad.safetensors", "load_file"].fallback
    assert all(c.seconds > 0 for c in fixed.calls)
    assert {c.strategy for c in base.calls} == {"none"}


def test_baseline_recording_reads_nothing_the_script_does_not(workload):
    """The baseline shim records names/dtypes/shapes only (digests come later, from the file): the
    pages a script leaves unread stay unread, exactly as without the shim."""
    from readtrace.pagecache.evict import evict
    from readtrace.pagecache.residency import cached_pages

    torch.manual_seed(2)
    big = workload / "big.safetensors"
    save_file({f"w{i}": torch.randn(256, 1024) for i in range(16)}, big)  # 16 x 1 MiB
    code = ("import sys; from safetensors import safe_open\n"
            "with safe_open(sys.argv[1], 'pt') as f: print(f.get_slice('w3')[:2].shape)")
    manifest = workload / "lazy.jsonl"
    residency = {}
    for shimmed in (False, True):
        evict([big])
        if shimmed:
            with shim_environment("none", manifest) as env:
                out = subprocess.run([sys.executable, "-c", code, str(big)], env=env, capture_output=True,
                                     text=True, timeout=120)
        else:
            out = subprocess.run([sys.executable, "-c", code, str(big)], capture_output=True, text=True,
                                 timeout=120)
        assert out.stdout.strip() == "torch.Size([2, 1024])", out.stderr
        residency[shimmed] = cached_pages(big)[0]
    # (safetensors 0.8 itself maps the whole file eagerly, its read-ahead reaching the file's last 100 KiB or
    # not: 4072 or 4097 pages of 4097; older versions read lazily): less than one more tensor's 256 pages
    assert residency[True] <= residency[False] + 64
    # digested when the call returned, from the file read past the page cache: residency unchanged
    loaded = read_manifest(manifest)
    [record] = loaded.tensors
    assert (record.name, record.shape) == ("w3[:2]", (2, 1024))
    assert fill_digests(loaded) == 0
    with safe_open(big, "pt") as f:
        assert record.sha256 == tensor_digest(f.get_tensor("w3")[:2])


def test_a_mapped_tensor_is_digested_from_its_file_once_per_comparison(workload):
    """A lazily mapped tensor is digested from the file's bytes; the first run of a comparison keeps
    those digests beside its manifest (inject/digestcache.py), a later run takes them from there while
    the file is unchanged (on a mount at 20 ms the read cost each run a second per 64 MiB), and reads
    the file again once it changed."""
    from readtrace.inject import digestcache

    torch.manual_seed(3)
    big = workload / "big.safetensors"
    save_file({f"w{i}": torch.randn(256, 1024) for i in range(4)}, big)
    code = ("import sys; from safetensors import safe_open\n"
            "with safe_open(sys.argv[1], 'pt') as f: print(f.get_slice('w3')[:2].shape)")

    def run(stem: str):
        manifest = workload / f"{stem}.jsonl"
        with shim_environment("none", manifest) as env:
            out = subprocess.run([sys.executable, "-c", code, str(big)], env=env, capture_output=True,
                                 text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        [record] = read_manifest(manifest).tensors
        return record.sha256

    with safe_open(big, "pt") as f:
        real = tensor_digest(f.get_tensor("w3")[:2])
    assert run("first") == real
    cache = digestcache.cache_path(workload / "first.jsonl")
    key = digestcache.file_key(str(big))
    assert digestcache.cached(cache, key) == {"w3[:2]": real}
    # What the second run reports comes from the cache, not from reading the file: a stand-in digest
    # written under the same identity is what it reports.
    cache.write_text(json.dumps({"key": key, "name": "w3[:2]", "sha256": "0" * 64}) + "\n")
    assert run("second") == "0" * 64
    stat = os.stat(big)
    os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # the file changed: read again
    assert run("third") == real
    assert digestcache.cached(cache, digestcache.file_key(str(big))) == {"w3[:2]": real}


def test_a_whole_slice_is_the_tensor_loaded_whole(workload):
    """transformers reads every tensor as ``get_slice(name)[...]``; its ``disable_mmap`` lever and
    load_file load each tensor whole. Both loaded the same tensors, so their manifests must match
    (they did not: ``w1[...]`` vs ``w1``, and auto never considered transformers' own lever)."""
    path = workload / "a.safetensors"
    part = "from safetensors import safe_open\nwith safe_open(sys.argv[1], 'pt') as f: p = f.get_slice('b1')[1:3]\n"
    scripts = {
        "sliced": ("import sys; from safetensors import safe_open\n"
                   "with safe_open(sys.argv[1], 'pt') as f:\n"
                   "    t = {k: f.get_slice(k)[...] for k in f.keys() if k != 'w1'}\n"
                   "    t['w1'] = f.get_slice('w1')[:, :]\n" + part),
        "whole": "import sys; from safetensors.torch import load_file\nt = load_file(sys.argv[1])\n" + part,
    }
    manifests = {}
    for label, code in scripts.items():
        manifest = workload / f"{label}.jsonl"
        with shim_environment("none", manifest) as env:
            out = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True,
                                 text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        manifests[label] = read_manifest(manifest)
        fill_digests(manifests[label])
    names = sorted(t.name for t in manifests["sliced"].tensors)
    assert names == ["b1", "b1[1:3]", "empty", "mask", "s", "w1"]  # a part keeps its index
    diff = compare_manifests(manifests["sliced"], manifests["whole"])
    assert diff.all_identical and diff.count == 6, diff


def test_manifest_difference_names_the_tensor(workload):
    _, base = run_script(workload, "none")
    save_file({"emb": torch.randn(10, 4), "head": torch.randn(6, 4).half()}, workload / "b.safetensors",
              metadata={"format": "pt"})
    _, changed = run_script(workload, "own-fd")
    diff = compare_manifests(base, changed)
    assert not diff.all_identical
    assert diff.differing == ["emb (b.safetensors)", "head[1:3] (b.safetensors)"]


def test_existing_sitecustomize_still_runs(workload, tmp_path_factory):
    user_site = tmp_path_factory.mktemp("user_site")
    marker = user_site / "ran"
    (user_site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    env = dict(os.environ, PYTHONPATH=str(user_site))
    out, manifest = run_script(workload, "own-fd", base_env=env)
    assert marker.read_text() == "yes"
    assert "storages=1 " in out and len(manifest.tensors) == 7


def test_unknown_strategy_is_a_usage_error():
    with pytest.raises(ReadtraceError, match="unknown fix strategy"), shim_environment("fast", None):
        pass


def test_script_without_safetensors_pays_nothing(tmp_path):
    """The hook imports nothing but the protocol (readtrace.rerun), the fork handler and failclosed (standard library only)
    until safetensors is imported."""
    with shim_environment("both", tmp_path / "m.jsonl") as env:
        out = subprocess.run([sys.executable, "-c", "import sys; print(sorted(m for m in sys.modules "
                              "if m.startswith(('readtrace', 'torch'))))"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout.replace("'", '"')) == ["readtrace", "readtrace.inject", "readtrace.inject.failclosed",
                                                        "readtrace.inject.forkfd", "readtrace.rerun", "readtrace.rerun.protocol"]


def test_auto_strategy_follows_the_file_system(workload, monkeypatch):
    from readtrace.inject import routing, shimstate

    monkeypatch.setattr(shimstate.STATE, "config", shimstate.Config(strategy="auto"))
    local = str(workload / "a.safetensors")  # on a local disk: mmap for CPU, own-fd for CUDA
    assert (routing.strategy_for(local, "cpu"), routing.strategy_for(local, "cuda:0")) == ("none", "own-fd")
    monkeypatch.setattr(routing, "is_remote", lambda p: True)
    assert routing.strategy_for(local, "cpu") == "both"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_device_override_loads_straight_to_cuda(workload):
    code = ("import sys, safetensors.torch as st; d = st.load_file(sys.argv[1]); "
            "print({t.device.type for t in d.values()})")
    manifest = workload / "cuda.jsonl"
    with shim_environment("own-fd", manifest, device="cuda") as env:
        out = subprocess.run([sys.executable, "-c", code, str(workload / "a.safetensors")], env=env,
                             capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "{'cuda'}", out.stderr
    _, base = run_script(workload, "none")
    fixed = read_manifest(manifest)
    assert {(t.name, t.sha256) for t in fixed.tensors} <= {(t.name, t.sha256) for t in base.tensors}


TRANSFORMERS_SCRIPT = """
import hashlib, sys, torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
h = hashlib.sha256()
for name, value in sorted(model.state_dict().items()):
    h.update(name.encode())
    h.update(value.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
print(h.hexdigest())
"""


def test_unchanged_transformers_from_pretrained(tmp_path):
    """transformers loads through safe_open/get_slice: the shim serves it, the model is bit-identical."""
    transformers = pytest.importorskip("transformers")  # optional: not a readtrace dependency
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=500, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "tiny")
    (tmp_path / "load.py").write_text(TRANSFORMERS_SCRIPT)
    results = {}
    for strategy in ("none", "both"):
        manifest = tmp_path / f"{strategy}.jsonl"
        with shim_environment(strategy, manifest) as env:
            out = subprocess.run([sys.executable, str(tmp_path / "load.py"), str(tmp_path / "tiny")], env=env,
                                 capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        results[strategy] = (out.stdout.strip(), read_manifest(manifest))
        fill_digests(results[strategy][1])
    assert results["none"][0] == results["both"][0]
    diff = compare_manifests(results["none"][1], results["both"][1])
    assert diff.all_identical and diff.count > 10
    assert {c.strategy for c in results["both"][1].calls} == {"both"}
    assert not any(c.fallback for c in results["both"][1].calls)


def test_missing_file_fails_as_without_the_shim(tmp_path):
    code = ("import sys, safetensors.torch as st\n"
            "try:\n    st.load_file(sys.argv[1])\nexcept Exception as e:\n    print(type(e).__name__)\n"
            "from safetensors import safe_open\n"
            "try:\n    safe_open(sys.argv[1], 'pt')\nexcept Exception as e:\n    print(type(e).__name__)\n")
    outputs = []
    for strategy in ("none", "auto", "both"):
        with shim_environment(strategy, tmp_path / f"{strategy}.jsonl") as env:
            out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "missing.safetensors")], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "Exception ignored" not in out.stderr, out.stderr
        outputs.append(out.stdout)
    plain = subprocess.run([sys.executable, "-c", code, str(tmp_path / "missing.safetensors")],
                           capture_output=True, text=True, timeout=120).stdout
    assert outputs == [plain] * 3


def test_a_file_is_read_for_its_digests_without_changing_what_is_cached(tmp_path):
    """Fully cached: read from the page cache (nothing fetched); not cached, or some pieces not: those read
    past it (nothing filled)."""
    from readtrace.inject.loaded import uncached_bytes
    from readtrace.pagecache.evict import evict
    from readtrace.pagecache.prefetch import prefetch
    from readtrace.pagecache.residency import cached_pages

    path = tmp_path / "f.bin"
    data = os.urandom(8 << 20)
    path.write_bytes(data)
    os.sync()
    prefetch([str(path)], progress=False)
    assert cached_pages(path)[0] == cached_pages(path)[1]
    assert uncached_bytes(str(path)) == data
    assert cached_pages(path)[0] == cached_pages(path)[1]
    with open(path, "rb") as f:  # some pieces gone (a warm run's file loses some): those read past the cache
        os.posix_fadvise(f.fileno(), 2 << 20, 2 << 20, os.POSIX_FADV_DONTNEED)  # whole folios, up to 2 MiB
    partly = cached_pages(path)[0]
    assert 0 < partly < cached_pages(path)[1]
    fetched = _storage_reads()
    assert uncached_bytes(str(path)) == data
    assert cached_pages(path)[0] == partly
    assert _storage_reads() - fetched <= 4 << 20  # the pieces not cached, not the whole 8 MiB past the cache
    evict([str(path)])
    assert uncached_bytes(str(path)) == data
    assert cached_pages(path)[0] == 0


def _storage_reads() -> int:
    """Bytes this process made the storage layer fetch (/proc/self/io read_bytes: page-cache hits not)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))


def test_a_files_bytes_are_parsed_for_digests_as_views_with_safetensors_digests(tmp_path):
    """The digests of a mapped load come from the file's bytes parsed by readtrace's header parser as
    views (no copy per tensor); they equal the digests of safetensors' own load, slices too; read-only
    bytes go through safetensors' own load."""
    import torch
    from safetensors.torch import load_file, save_file

    from readtrace.inject.loaded import lookup, safetensors_from_bytes, uncached_bytes
    from readtrace.inject.manifest import tensor_digest

    path = tmp_path / "m.safetensors"
    save_file({"w": torch.randn(64, 32), "b": torch.arange(7, dtype=torch.int16), "h": torch.ones(3, dtype=torch.bfloat16),
               "e": torch.empty(0, 4)}, path)
    data = uncached_bytes(str(path))
    views, ref = safetensors_from_bytes(data), load_file(path)
    assert isinstance(data, bytearray) and views["w"].data_ptr() != ref["w"].data_ptr()
    assert {k: (v.dtype, v.shape, tensor_digest(v)) for k, v in views.items()} == \
        {k: (v.dtype, v.shape, tensor_digest(v)) for k, v in ref.items()}
    assert tensor_digest(lookup(views, "w", (slice(3, 9), slice(None, None, 2)))) == tensor_digest(ref["w"][3:9, ::2])
    assert tensor_digest(safetensors_from_bytes(bytes(data))["w"]) == tensor_digest(ref["w"])  # read-only: copies
