"""Tensor shapes and dtypes as kernel_details.csv writes them (``4096,1,1024;1024``, ``DT_BF16;INT64``)."""

from __future__ import annotations

import math

Shape = tuple[int, ...]

# bytes per element; dtypes the profiler writes with or without the DT_ prefix
DTYPE_BYTES = {
    "BF16": 2,
    "FLOAT16": 2,
    "FP16": 2,
    "FLOAT": 4,
    "FLOAT32": 4,
    "FP32": 4,
    "DOUBLE": 8,
    "INT8": 1,
    "UINT8": 1,
    "INT4": 0.5,
    "INT16": 2,
    "INT32": 4,
    "INT64": 8,
    "UINT32": 4,
    "UINT64": 8,
    "BOOL": 1,
    "HIFLOAT8": 1,
    "FLOAT8_E4M3FN": 1,
    "FLOAT8_E5M2": 1,
}

# the dtype a cube kernel computes in, by its first input's dtype (peaks are given per compute dtype)
COMPUTE_DTYPE = {
    "BF16": "bf16",
    "FLOAT16": "fp16",
    "FP16": "fp16",
    "FLOAT": "fp32",
    "FLOAT32": "fp32",
    "INT8": "int8",
    "INT4": "int4",
    "HIFLOAT8": "fp8",
    "FLOAT8_E4M3FN": "fp8",
    "FLOAT8_E5M2": "fp8",
}


def parse_shapes(text: object) -> list[Shape | None]:
    """One entry per tensor: its dims, or None where the tensor is absent or its dims are not numbers."""
    if not isinstance(text, str) or not text.strip():
        return []
    shapes: list[Shape | None] = []
    for part in text.strip().strip('"').split(";"):
        part = part.strip()
        if not part:
            shapes.append(None)
            continue
        try:
            dims = tuple(int(d) for d in part.split(","))
        except ValueError:
            shapes.append(None)
            continue
        shapes.append(dims if all(d >= 0 for d in dims) else None)
    return shapes


def parse_dtypes(text: object) -> list[str]:
    """One upper-case dtype name per tensor without the DT_ prefix ('' where the capture says nothing)."""
    if not isinstance(text, str):
        return []
    return [part.strip().upper().removeprefix("DT_") for part in text.split(";")]


def numel(shape: Shape | None) -> int:
    return math.prod(shape) if shape else 0


def tensor_bytes(shapes: list[Shape | None], dtypes: list[str]) -> float | None:
    """Bytes of the listed tensors; None when a present tensor has an unknown dtype."""
    total = 0.0
    for i, shape in enumerate(shapes):
        if shape is None:
            continue
        size = DTYPE_BYTES.get(dtypes[i] if i < len(dtypes) else "")
        if size is None:
            return None
        total += numel(shape) * size
    return total


def compute_dtype(dtypes: list[str]) -> str | None:
    """The compute dtype of a cube kernel from its first input (None when not a known float / int type)."""
    return COMPUTE_DTYPE.get(dtypes[0]) if dtypes else None
