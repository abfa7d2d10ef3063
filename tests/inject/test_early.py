"""Early reads (inject/early.py): a file read into memory of our own at start-up, taken once, and
given up when the file changed since; the own-fd loader's tensors built from those bytes."""

from __future__ import annotations

import os

import torch
from safetensors.torch import load_file, save_file

from readtrace.inject import early
from readtrace.loader.loader import tensors_from_memory


def checkpoint(path):
    torch.manual_seed(3)
    tensors = {f"w{i}": torch.randn(64, 257) for i in range(5)} | {"odd": torch.arange(7, dtype=torch.int8)}
    save_file(tensors, path)
    return tensors


def test_taken_once_with_the_files_bytes_and_the_same_tensors(tmp_path):
    path = tmp_path / "model.safetensors"
    expected = checkpoint(path)
    assert early.start([str(path)], chunk_bytes=4096) == [str(path)]
    data, note = early.take(str(path), "both")
    assert bytes(data) == path.read_bytes()
    assert note.bytes == path.stat().st_size and note.note is None
    loaded = tensors_from_memory(path, data)
    assert loaded.keys() == expected.keys() == load_file(path).keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)
    assert early.take(str(path), "both") == (None, None)  # once: a second load reads the file itself


def test_several_readers_each_read_their_span_into_the_same_bytes(tmp_path):
    """With the own-fd loader's N threads (sshfs at 20 ms: 4 readers read 256 MiB in 3.3 s, one in 12.2 s)
    the early read splits each file into N MiB-aligned spans, each read on an fd of its own."""
    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(5 * (1 << 20) + 12345))  # 3 spans of 2 MiB, the last one short
    assert early.start([str(path)], chunk_bytes=1 << 20, readers=4) == [str(path)]
    data, note = early.take(str(path), "own-fd")
    assert data is not None and bytes(data) == path.read_bytes()
    assert note.bytes == path.stat().st_size and note.note is None


def test_a_file_changed_since_is_not_used(tmp_path):
    path = tmp_path / "model.safetensors"
    checkpoint(path)
    early.start([str(path)], chunk_bytes=1 << 20)
    early._EARLY[str(path)].done.wait()
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # rewritten in place
    data, note = early.take(str(path), "both")
    assert data is None and "changed" in note.note


def test_nothing_is_read_early_that_does_not_fit_in_memory(tmp_path, monkeypatch):
    path = tmp_path / "model.safetensors"
    checkpoint(path)
    monkeypatch.setattr(early, "MEMORY_SHARE", 0.0)
    assert early.start([str(path)], chunk_bytes=1 << 20) == []
    assert early.take(str(path), "both") == (None, None)


def test_a_file_that_cannot_be_read_is_left_to_the_loader(tmp_path):
    assert early.start([str(tmp_path / "missing.safetensors")], chunk_bytes=1 << 20) == []


def test_start_up_reads_early_on_dropping_mounts_and_still_prefetches_the_others(tmp_path, monkeypatch):
    """One rerun, two files: the one on a mount that drops the page cache is read early, the one on a
    mount that keeps it is still prefetched into the page cache; children are told both were read."""
    from readtrace.inject import startup
    from readtrace.rerun.protocol import Rerun

    drop, keep = tmp_path / "drop.safetensors", tmp_path / "keep.safetensors"
    checkpoint(drop)
    checkpoint(keep)
    monkeypatch.setattr(startup, "is_remote", lambda f: True)  # both "remote"; which one keeps its cache:
    monkeypatch.setattr(startup, "_cache_kept", lambda f: str(f) == str(keep))
    env = Rerun(strategy="both", prefetch_files=(str(drop), str(keep)), prefetch_pin_s=0).to_env({})
    startup.prefetch_at_start(env)
    data, _ = early.take(str(drop), "both")
    assert bytes(data) == drop.read_bytes()
    assert early.take(str(keep), "both") == (None, None)
    assert set(Rerun.from_env(env).prefetched) == {str(drop), str(keep)}


def test_handles_open_at_the_same_time_share_one_load_and_the_last_lets_go(tmp_path, monkeypatch):
    from safetensors import safe_open

    from readtrace.inject import routing, shimstate
    from readtrace.inject.safeopen import Handle

    path = tmp_path / "model.safetensors"
    expected = checkpoint(path)
    monkeypatch.setattr(shimstate.STATE.config, "strategy", "own-fd")
    monkeypatch.setattr(shimstate.STATE.config, "manifest", None)
    first = Handle(safe_open, path, "pt", "cpu", (), {})
    second = Handle(safe_open, path, "pt", "cpu", (), {})
    a, b = first.get_tensor("w0"), second.get_tensor("w1")
    assert torch.equal(a, expected["w0"]) and torch.equal(b, expected["w1"])
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # one load
    first.close()
    assert routing.SHARED  # the second is still open
    second.close()
    assert not routing.SHARED  # nothing held once the last handle is closed
    third = Handle(safe_open, path, "pt", "cpu", (), {})
    assert third.get_tensor("w0").untyped_storage().data_ptr() != a.untyped_storage().data_ptr()  # loaded anew
    third.close()
