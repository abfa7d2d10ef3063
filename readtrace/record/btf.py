"""A small pure-Python BTF reader: struct member offsets of the running kernel.

Kernel headers on disk may not match the running kernel (e.g. ``file.f_pos`` at 104 vs 112), so every
kernel struct the probes read uses offsets taken from ``/sys/kernel/btf/vmlinux`` at run time.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from pathlib import Path

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
BTF_MAGIC = 0xEB9F

# BTF kinds (include/uapi/linux/btf.h)
INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT = range(1, 12)
FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(12, 20)

# Bytes that follow the 12-byte type header, per kind: fixed, and per vlen item.
_EXTRA = {INT: (4, 0), ARRAY: (12, 0), STRUCT: (0, 12), UNION: (0, 12), ENUM: (0, 8),
          FUNC_PROTO: (0, 8), VAR: (4, 0), DATASEC: (0, 12), DECL_TAG: (4, 0), ENUM64: (0, 12)}
_MODIFIERS = (TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG)


class BTFError(Exception):
    """The BTF blob is missing or has an unexpected layout."""


class BTF:
    """Types of one BTF blob, indexed lazily: only struct/union members are decoded."""

    def __init__(self, data: bytes):
        magic, _version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
        if magic != BTF_MAGIC:
            raise BTFError("not a BTF blob (bad magic)")
        type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", data, 8)
        self._types = memoryview(data)[hdr_len + type_off: hdr_len + type_off + type_len]
        self._strs = bytes(data[hdr_len + str_off: hdr_len + str_off + str_len])
        self._offsets: list[int] = [0]  # type id -> byte offset in the type section (id 0 = void)
        self._by_name: dict[str, int] = {}
        self._index()

    def _name(self, off: int) -> str:
        end = self._strs.index(b"\0", off)
        return self._strs[off:end].decode()

    def _index(self) -> None:
        types, pos, n = self._types, 0, len(self._types)
        unpack = struct.unpack_from
        while pos < n:
            name_off, info, _size = unpack("<III", types, pos)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            self._offsets.append(pos)
            if kind in (STRUCT, UNION) and name_off:
                self._by_name.setdefault(self._name(name_off), len(self._offsets) - 1)
            fixed, per_item = _EXTRA.get(kind, (0, 0))
            pos += 12 + fixed + per_item * vlen

    def _header(self, type_id: int) -> tuple[int, int, int, int, int]:
        pos = self._offsets[type_id]
        name_off, info, size_or_type = struct.unpack_from("<III", self._types, pos)
        return pos, name_off, (info >> 24) & 0x1F, info & 0xFFFF, size_or_type | ((info >> 31) << 32)

    def _members(self, type_id: int):
        """(name, type id, bit offset) of a struct/union's members; anonymous members are flattened."""
        pos, _name_off, kind, vlen, size_kflag = self._header(type_id)
        kind_flag = size_kflag >> 32
        for i in range(vlen):
            m_name, m_type, m_off = struct.unpack_from("<III", self._types, pos + 12 + 12 * i)
            bit_off = m_off & 0xFFFFFF if kind_flag else m_off
            if m_name:
                yield self._name(m_name), m_type, bit_off
            else:
                inner = self._resolve(m_type)
                if self._header(inner)[2] in (STRUCT, UNION):
                    for name, t, off in self._members(inner):
                        yield name, t, bit_off + off

    def _resolve(self, type_id: int) -> int:
        while True:
            _pos, _n, kind, _v, size_or_type = self._header(type_id)
            if kind not in _MODIFIERS:
                return type_id
            type_id = size_or_type & 0xFFFFFFFF

    def has_struct(self, name: str) -> bool:
        return name in self._by_name

    def offset(self, struct_name: str, member: str) -> int:
        """Byte offset of ``struct_name.member`` (nested anonymous structs/unions included)."""
        type_id = self._by_name.get(struct_name)
        if type_id is None:
            raise BTFError(f"struct {struct_name} not in kernel BTF")
        for name, _t, bit_off in self._members(type_id):
            if name == member:
                if bit_off % 8:
                    raise BTFError(f"{struct_name}.{member} is a bitfield")
                return bit_off // 8
        raise BTFError(f"{struct_name} has no member {member}")


@lru_cache(maxsize=1)
def kernel_btf() -> BTF:
    """The running kernel's BTF (parsed once per process)."""
    try:
        return BTF(VMLINUX_BTF.read_bytes())
    except OSError as e:
        raise BTFError(f"cannot read {VMLINUX_BTF}: {e.strerror}") from e
