"""Model weights on disk: a small .safetensors reader and writer (no extra dependency), and serving
a model's parameters from a memory map of such a file, as model servers that mmap weights do."""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from reference_pipeline import pagecache

M = TypeVar("M", bound=nn.Module)

_SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}


def read_safetensors(
    path: Path, *, mapped: bool = False, drop_page_cache: bool = False
) -> dict[str, torch.Tensor]:
    """Read a .safetensors file: an 8-byte little-endian header length, a JSON header, raw data.

    mapped: the tensors alias a private (copy-on-write) memory map of the file instead of a copy, so
    their pages are read from disk on first touch, as model servers that mmap weights do.
    drop_page_cache: first ask the kernel to forget the file's cached pages (a fresh node's state).
    """
    if drop_page_cache:
        pagecache.drop_page_cache(path)
    with open(path, "rb") as f:
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if mapped else bytearray(f.read())
    (header_len,) = struct.unpack("<Q", buffer[:8])
    header = json.loads(bytes(buffer[8 : 8 + header_len]))
    base = 8 + header_len
    tensors = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        dtype = _SAFETENSORS_DTYPES[meta["dtype"]]
        count = (end - start) // dtype.itemsize
        flat = (
            torch.frombuffer(buffer, dtype=dtype, count=count, offset=base + start)
            if count
            else torch.empty(0)
        )
        tensors[name] = flat.reshape(meta["shape"])
    return tensors


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """The inverse of read_safetensors (written as fp32), synced to disk."""
    header, chunks, offset = {}, [], 0
    for name, tensor in tensors.items():
        raw = tensor.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    encoded = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded)
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())


def serve_from_file(model: M, path: Path, *, cold: bool) -> M:
    """Save the model's weights to `path` and re-point its parameters at a memory map of that file.

    This is how the service holds its weights: parameters alias the mapped file. With `cold`, the
    file's pages are dropped from the page cache first, so the first forward passes read the
    weights from disk, as on a freshly started node; a warm-up pass pays that cost before traffic.
    """
    write_safetensors(path, model.state_dict())
    model.load_state_dict(read_safetensors(path, mapped=True, drop_page_cache=cold), assign=True)
    return model
