"""The safetensors file format, read through a memory map: every dtype checkpoints use (bf16
included, which the ``safetensors`` package's NumPy API cannot give), and any slice of a tensor
without reading the rest.

A file is an 8-byte little-endian header length, a JSON header ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}}`` (plus ``__metadata__``), then the raw row-major data.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
from jax.numpy import bfloat16

DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


class SafetensorsFile:
    """One ``.safetensors`` file, its tensors read lazily (a memory map: reading a slice
    touches only its bytes).

    Raises (from the constructor):
      ValueError: not a readable safetensors file (with what to do).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                if size > self.path.stat().st_size:
                    raise ValueError(f"header of {size} bytes in a shorter file")
                header = json.loads(f.read(size))
            header.pop("__metadata__", None)
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r") if header else None
            self._start = 8 + size
            self._header = header
            for name, info in header.items():
                dtype = DTYPES.get(info["dtype"])
                if dtype is None:
                    raise ValueError(f"tensor {name} has dtype {info['dtype']}")
                begin, end = info["data_offsets"]
                if (end - begin) != np.dtype(dtype).itemsize * int(np.prod(info["shape"])):
                    raise ValueError(f"tensor {name}'s byte range does not match its shape")
                if self._start + end > self._map.size:
                    raise ValueError(f"tensor {name} runs past the end of the file (truncated)")
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            raise ValueError(
                f"{self.path} is not a readable safetensors file ({e}); download it again"
            ) from e

    def keys(self) -> list[str]:
        """The tensor names."""
        return list(self._header)

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape."""
        return tuple(self._header[name]["shape"])

    def dtype(self, name: str) -> np.dtype:
        """A tensor's NumPy dtype (``bfloat16`` of ml_dtypes for BF16)."""
        return np.dtype(DTYPES[self._header[name]["dtype"]])

    def get(self, name: str, index: tuple | None = None) -> np.ndarray:
        """Tensor ``name`` (or its slice ``index``, a tuple of slices), copied into memory in
        its stored dtype."""
        info = self._header[name]
        begin, end = info["data_offsets"]
        raw = self._map[self._start + begin : self._start + end]
        x = raw.view(self.dtype(name)).reshape(self.shape(name))
        return np.array(x if index is None else x[index])


def save_file(tensors: dict[str, np.ndarray], path: str | Path, metadata=None) -> None:
    """Writes ``tensors`` (NumPy arrays of the dtypes in :data:`DTYPES`) as one safetensors
    file, in the order given."""
    header, offset = {}, 0
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    for name, x in arrays.items():
        header[name] = {
            "dtype": _NAMES[x.dtype],
            "shape": list(x.shape),
            "data_offsets": [offset, offset + x.nbytes],
        }
        offset += x.nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for x in arrays.values():
            f.write(x.tobytes())
