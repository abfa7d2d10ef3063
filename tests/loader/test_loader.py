"""The own-fd loader returns exactly what safetensors.torch.load_file returns, on real files."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file as reference_load
from safetensors.torch import save_file

from readtrace.errors import ExitStatus
from readtrace.exits import exit_status
from readtrace.inject.manifest import raw_bytes
from readtrace.loader.errors import DeviceUnavailableError
from readtrace.loader.header import DTYPES, CheckpointFormatError
from readtrace.loader.loader import load_file

TORCH_DTYPES = sorted({getattr(torch, attr) for attr, _ in DTYPES.values() if hasattr(torch, attr)}, key=str)


def assert_same_tensors(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    # safetensors orders by offset; tensors tied at one offset (empty ones) come in hash order.
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        have = got[name]
        assert (have.dtype, tuple(have.shape)) == (want.dtype, tuple(want.shape)), name
        assert torch.equal(raw_bytes(have), raw_bytes(want)), name


def random_tensor(draw, dtype: torch.dtype) -> torch.Tensor:
    # safetensors cannot save a 0-dim packed F4 tensor (half a byte): give those at least one dim.
    min_dims = 1 if dtype == torch.float4_e2m1fn_x2 else 0
    shape = draw(st.lists(st.integers(0, 6), min_size=min_dims, max_size=3))
    numel = 1
    for d in shape:
        numel *= d
    if dtype == torch.bool:
        return torch.tensor(draw(st.lists(st.booleans(), min_size=numel, max_size=numel)),
                            dtype=torch.bool).reshape(shape)
    nbytes = numel * dtype.itemsize
    data = draw(st.binary(min_size=nbytes, max_size=nbytes))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape) if nbytes \
        else torch.empty(shape, dtype=dtype)


@st.composite
def state_dicts(draw):
    names = draw(st.lists(st.text("abcxyz._0123", min_size=1, max_size=8), min_size=1, max_size=8, unique=True))
    return {name: random_tensor(draw, draw(st.sampled_from(TORCH_DTYPES))) for name in names}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensors=state_dicts(), chunk=st.sampled_from([1, 7, 64, 1 << 20]), threads=st.integers(1, 3),
       cpu_storage=st.sampled_from(["copy", "map"]))
def test_equals_safetensors_on_random_files(tensors, chunk, threads, cpu_storage):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.safetensors")
        save_file(tensors, path, metadata={"format": "pt"})
        got = load_file(path, chunk_bytes=chunk, threads=threads, cpu_storage=cpu_storage)
        assert_same_tensors(reference_load(path), got)


def test_special_tensors(tmp_path):
    tensors = {
        "scalar": torch.tensor(3.5, dtype=torch.bfloat16),
        "empty": torch.zeros(0, 4),
        "mask": torch.tensor([True, False, True]),
        "f8": torch.linspace(-2, 2, 9).to(torch.float8_e4m3fn),
        "f8e5": torch.linspace(-2, 2, 9).to(torch.float8_e5m2),
        "big": torch.randn(1000, 33),
        "u64": torch.arange(5).to(torch.uint64),
        "c64": torch.randn(3, dtype=torch.complex64),
    }
    path = tmp_path / "special.safetensors"
    save_file(tensors, path)
    got = load_file(path, chunk_bytes=4096, threads=2)
    assert_same_tensors(reference_load(path), got)
    assert got["scalar"].dim() == 0 and got["scalar"].item() == 3.5
    assert got["empty"].shape == (0, 4)


def test_loaded_dict_can_be_saved_again(tmp_path):
    """Tensors are views of one buffer; save_file must still accept them (no overlap)."""
    src, dst = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file({"w": torch.randn(64, 64), "b": torch.randn(64)}, src)
    save_file(load_file(src), dst)
    assert_same_tensors(reference_load(src), reference_load(dst))


def test_unaligned_offsets_are_copied_not_refused(tmp_path):
    """A hand-written file whose F32 tensor starts at an odd offset still loads correctly."""
    u8, f32 = bytes([1, 2, 3]), torch.tensor([1.5, -2.0]).numpy().tobytes()
    header = (b'{"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},'
              b'"b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}}')
    path = write_raw(tmp_path, header, u8 + f32)
    for mode in ("copy", "map"):
        got = load_file(path, cpu_storage=mode)
        assert got["a"].tolist() == [1, 2, 3] and got["b"].tolist() == [1.5, -2.0]
        assert_same_tensors(reference_load(path), got)


def file_bytes(header: bytes, data: bytes, *, length: int | None = None) -> bytes:
    """A safetensors file's bytes; ``length`` overrides the 8-byte header length."""
    return (len(header) if length is None else length).to_bytes(8, "little") + header + data


def write_raw(tmp_path, header: bytes, data: bytes, *, length: int | None = None):
    path = tmp_path / "raw.safetensors"
    path.write_bytes(file_bytes(header, data, length=length))
    return path


GOOD = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
MALFORMED = {  # case -> (file bytes, expected message)
    "empty file": (b"", "empty"),
    "short file": (b"\x01\x02", "shorter than"),
    "header past EOF": (file_bytes(GOOD, bytes(8), length=len(GOOD) + 9), "past the end"),
    "header too large": (file_bytes(GOOD, bytes(8), length=1 << 40), "exceeds"),
    "bad json": (file_bytes(b'{"w":{"dtype":"F32",', bytes(8)), "malformed JSON"),
    "not an object": (file_bytes(b"[1,2]", b""), "does not start"),
    "unknown dtype": (file_bytes(GOOD.replace(b"F32", b"F17"), bytes(8)), "unknown dtype 'F17'"),
    "overlap": (file_bytes(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                           b'"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', bytes(8)), "overlaps"),
    "hole": (file_bytes(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', bytes(8)), "hole"),
    "out of range": (file_bytes(b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', bytes(8)),
                     "truncated"),
    "truncated data": (file_bytes(GOOD, bytes(5)), "truncated"),
    "trailing bytes": (file_bytes(GOOD, bytes(12)), "after the last tensor"),
    "size mismatch": (file_bytes(GOOD.replace(b"[2]", b"[3]"), bytes(8)), "needs 12 bytes"),
    "negative offset": (file_bytes(GOOD.replace(b"[0,8]", b"[-1,8]"), bytes(8)), "invalid data_offsets"),
    "reversed offsets": (file_bytes(GOOD.replace(b"[0,8]", b"[8,0]"), bytes(8)), "invalid data_offsets"),
    "bad shape": (file_bytes(GOOD.replace(b"[2]", b'["2"]'), bytes(8)), "invalid shape"),
    "bad metadata": (file_bytes(b'{"__metadata__":{"a":1},' + GOOD[1:], bytes(8)), "__metadata__"),
    "not utf-8": (file_bytes(b'{"\xff":{}}', b""), "malformed JSON"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_raise_a_clear_error(tmp_path, case):
    content, message = MALFORMED[case]
    path = tmp_path / "raw.safetensors"
    path.write_bytes(content)
    with pytest.raises(CheckpointFormatError) as err:
        load_file(path)
    assert isinstance(err.value, ValueError)  # a drop-in: callers catching ValueError keep working
    assert exit_status(err.value) == ExitStatus.BAD_INPUT  # what the command line makes of it
    assert message in str(err.value) and str(path) in str(err.value)
    with pytest.raises(Exception):  # noqa: B017 - safetensors refuses the same file (any error type)
        reference_load(path)


def test_duplicate_tensor_names_are_refused(tmp_path):
    """safetensors silently keeps one of two same-named entries; a checkpoint like that is broken."""
    path = write_raw(tmp_path, GOOD[:-1] + b"," + GOOD[1:-1] + b"}", bytes(8))
    with pytest.raises(CheckpointFormatError, match="duplicate key 'w'"):
        load_file(path)


def test_missing_file_raises_what_safetensors_raises(tmp_path):
    for load in (load_file, reference_load):
        with pytest.raises(FileNotFoundError):
            load(tmp_path / "nope.safetensors")


def _truncate_after_header(monkeypatch, path):
    """Make the file lose its data right after the loader validated the header."""
    import readtrace.loader.loader as loader

    original = loader.read_header

    def read_then_truncate(fd, p):
        header = original(fd, p)
        os.truncate(path, header.data_start + 100)
        return header

    monkeypatch.setattr(loader, "read_header", read_then_truncate)


def test_file_shrinking_during_load_is_reported(tmp_path, monkeypatch):
    """Data that disappears after the header was validated is a clear error, not a crash."""
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.randn(4096)}, path)
    _truncate_after_header(monkeypatch, path)
    with pytest.raises(CheckpointFormatError, match="truncated while reading"):
        load_file(path)


def test_no_cuda_is_a_prerequisite_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.ones(2)}, path)
    with pytest.raises(DeviceUnavailableError) as err:
        load_file(path, device="cuda")
    assert isinstance(err.value, RuntimeError) and exit_status(err.value) == ExitStatus.PREREQUISITE


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("pinned", [True, False])
@pytest.mark.parametrize("threads", [1, 3])
def test_cuda_load_equals_safetensors(tmp_path, pinned, threads):
    tensors = {"a": torch.randn(300, 70), "b": torch.tensor(1.0, dtype=torch.bfloat16),
               "c": torch.zeros(0, 2), "d": torch.arange(1001, dtype=torch.int16),
               "e": torch.randn(7).to(torch.float8_e4m3fn)}
    path = tmp_path / "m.safetensors"
    save_file(tensors, path)
    got = load_file(path, device="cuda", chunk_bytes=8192, pinned=pinned, threads=threads)
    assert all(t.device.type == "cuda" for t in got.values())
    assert_same_tensors(reference_load(path, device="cuda"), got)


@pytest.mark.cuda
@cuda
def test_cuda_device_index_forms(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.randn(10)}, path)
    for device in (0, "cuda:0", torch.device("cuda", 0)):
        assert load_file(path, device=device)["w"].device == torch.device("cuda", 0)


@pytest.mark.cuda
@cuda
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensors=state_dicts(), chunk=st.sampled_from([5, 4096, 1 << 20]), threads=st.integers(1, 4),
       buffers=st.integers(1, 3))
def test_cuda_equals_safetensors_on_random_files(tensors, chunk, threads, buffers):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.safetensors")
        save_file(tensors, path)
        got = load_file(path, "cuda", chunk_bytes=chunk, threads=threads, num_buffers=buffers)
        assert_same_tensors(reference_load(path, device="cuda"), got)


@pytest.mark.parametrize("slot,buffers", [(1, 1), (7, 2), (4096, 3), (1 << 20, 2)])
def test_staging_pipeline_on_cpu(tmp_path, slot, buffers):
    """The CUDA path's staging loop (buffer rotation, chunking, short files), run with a CPU target."""
    from readtrace.loader.devicecopy import copy_through_staging
    from readtrace.loader.fileio import open_fd

    data = os.urandom(10_000)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    dest = torch.empty(9_990, dtype=torch.uint8)
    with open_fd(path) as fd:
        assert copy_through_staging(fd, 10, dest, min(slot, 9_990), False, buffers) == 9_990
        assert bytes(dest.numpy()) == data[10:]
        short = torch.empty(100, dtype=torch.uint8)
        assert copy_through_staging(fd, 9_950, short, min(slot, 100), False, buffers) == 50  # file ends


def test_mapped_tensors_are_private_and_outlive_the_fd(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.arange(1024, dtype=torch.float32), "s": torch.tensor(1.0, dtype=torch.float64)}, path)
    before = path.read_bytes()
    got = load_file(path, cpu_storage="map")
    got["w"] += 1  # copy-on-write: the file never changes
    assert got["w"][5].item() == 6.0 and path.read_bytes() == before
    assert got["s"].item() == 1.0


def test_mapped_load_reports_shrinking_and_bad_mode(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.randn(4096)}, path)
    with pytest.raises(ValueError, match="cpu_storage must be auto, copy or map"):
        load_file(path, cpu_storage="lazy")
    _truncate_after_header(monkeypatch, path)
    with pytest.raises(CheckpointFormatError, match="truncated while reading"):
        load_file(path, cpu_storage="map")
