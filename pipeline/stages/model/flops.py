"""FLOPs and bytes of one kernel call from its shapes (matmul, grouped matmul, flash attention, vector).

Runs once per distinct (kernel, shapes, dtypes) of a rank, never per event: a capture has a few
hundred distinct shapes and millions of calls. Every figure carries the formula it came from and a
confidence; where the shapes cannot say (a paged KV cache, a fractal layout), FLOPs stay unknown.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.distinct import first_rows
from npuprof.pipeline.modelinfo.shapes import Shape, compute_dtype, numel, parse_dtypes, parse_shapes, tensor_bytes

FLOPS_COLUMNS = (
    "flops_per_call",
    "bytes_per_call",
    "flops_kind",  # cube | vector | null (no FLOPs counted)
    "compute_dtype",
    "flops_formula",
    "flops_confidence",  # high | medium | low | none
)
VECTOR_OP_TYPES = ("aiv",)


@dataclass
class Estimate:
    flops: float | None = None
    kind: str | None = None
    formula: str = ""
    confidence: str = "none"


@lru_cache(maxsize=None)
def _formula_patterns() -> tuple[tuple[str, re.Pattern], ...]:
    rules = knowledge.load("model_shapes")["flops"]
    return tuple((formula, re.compile("|".join(f"(?:{p})" for p in patterns))) for formula, patterns in rules.items())


def formula_of(kernel_type: object) -> str | None:
    """The FLOPs formula of a kernel type (knowledge/model_shapes.yaml ``flops``), None when none applies."""
    if not isinstance(kernel_type, str):
        return None
    for formula, pattern in _formula_patterns():
        if pattern.fullmatch(kernel_type):
            return formula
    return None


def matmul_dims(a: Shape, b: Shape, out: Shape) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of ``out = a @ b`` with either operand possibly transposed, or None."""
    if len(out) < 2 or len(a) < 2 or len(b) < 2:
        return None
    batch, m, n = math.prod(out[:-2]), out[-2], out[-1]
    x, y = a[-2], a[-1]
    if x == m and y != m:
        k = y
    elif y == m and x != m:
        k = x
    elif x == y == m:
        k = m
    else:
        return None
    if k not in b[-2:] or n not in b[-2:]:
        return None
    return batch, m, n, k


def _matmul(ins: list, outs: list) -> Estimate:
    if len(ins) < 2 or not outs or ins[0] is None or ins[1] is None or outs[0] is None:
        return Estimate(formula="matmul: operand shapes missing")
    dims = matmul_dims(ins[0], ins[1], outs[0])
    if dims is None:
        return Estimate(formula=f"matmul: shapes {ins[0]} x {ins[1]} -> {outs[0]} do not fit a matmul")
    batch, m, n, k = dims
    prefix = f"{batch}·" if batch > 1 else ""
    return Estimate(2.0 * batch * m * n * k, "cube", f"2·{prefix}M·N·K (M={m}, N={n}, K={k})", "high")


def _grouped_matmul(ins: list, outs: list) -> Estimate:
    if not ins or ins[0] is None or not outs or outs[0] is None or len(ins[0]) != 2:
        return Estimate(formula="grouped matmul: token shapes missing")
    tokens, k = ins[0]
    n = outs[0][-1]
    weight = ins[1] if len(ins) > 1 else None
    if weight is not None and (k not in weight[-2:] or n not in weight[-2:]):
        return Estimate(formula=f"grouped matmul: weight {weight} does not hold K={k} and N={n}")
    return Estimate(2.0 * tokens * k * n, "cube", f"2·T·K·N over routed tokens (T={tokens}, K={k}, N={n})", "high")


def _attention_dims(ins: list, outs: list) -> tuple[int, int, int, int, str, str] | None:
    """(batch, q_len, kv_len, q_width = heads·head_dim, layout, confidence) of a flash-attention call."""
    q, k = (ins + [None, None])[:2]
    if q is None or k is None:
        return None
    stats = [s for s in [*ins[3:], *outs] if s is not None and len(s) == 4 and s[-1] == 8]
    batch_stats = stats[0] if stats else None  # softmax max / sum: [B, N, Sq, 8]
    head_dims = set(knowledge.load("model_shapes")["head_dims"])
    if len(q) == 2:  # packed tokens [T, N·D]: taken as one sequence
        return 1, q[0], k[0], q[1], "TH", "medium"
    if len(q) == 3 and q[-1] in head_dims and q[-2] <= 256 and batch_stats is None:
        return 1, q[0], k[0], q[1] * q[2], "TND", "medium"
    if len(q) == 3:
        if batch_stats is not None:
            b, s = batch_stats[0], batch_stats[2]
            kv = k[0] * k[1] // b if b else 0
            return b, s, kv, q[2], "BSH/SBH", "high"
        if q[0] == 1:
            return 1, q[1], k[1], q[2], "BSH", "medium"
        if q[1] == 1:
            return 1, q[0], k[0], q[2], "SBH", "medium"
        return q[0], q[1], k[1], q[2], "BSH", "low"
    if len(q) == 4:
        if batch_stats is not None and q[1] == batch_stats[1]:
            return q[0], q[2], k[2], q[1] * q[3], "BNSD", "high"
        if batch_stats is not None and q[2] == batch_stats[1]:
            return q[0], q[1], k[1], q[2] * q[3], "BSND", "high"
        return q[0], q[2], k[2], q[1] * q[3], "BNSD", "low"
    return None


def _causal(ins: list, min_side: int) -> bool:
    return any(s is not None and len(s) == 2 and s[0] == s[1] and s[0] >= min_side for s in ins[3:])


def _flash_attention(ins: list, outs: list, factor: float, name: str) -> Estimate:
    dims = _attention_dims(ins, outs)
    if dims is None:
        return Estimate(formula=f"{name}: query / key shapes missing")
    batch, q_len, kv_len, width, layout, confidence = dims
    causal = _causal(ins, knowledge.load("model_shapes")["causal_mask_min_side"])
    flops = 4.0 * batch * q_len * kv_len * width * factor * (0.5 if causal else 1.0)
    scale = f"{factor}·" if factor != 1 else ""
    mask = " · ½ (mask input: causal)" if causal else ""
    formula = f"{scale}4·B·Sq·Skv·(N·D) (B={batch}, Sq={q_len}, Skv={kv_len}, N·D={width}, {layout}){mask}"
    return Estimate(flops, "cube", formula, confidence)


def estimate(
    kernel_type: object, op_type: object, input_shapes: object, output_shapes: object, input_formats: object
) -> Estimate:
    """FLOPs of one call of a kernel from its Type and shapes (no hardware involved)."""
    ins, outs = parse_shapes(input_shapes), parse_shapes(output_shapes)
    formula = formula_of(kernel_type)
    fractal = isinstance(input_formats, str) and "FRACTAL" in input_formats.upper()
    if formula in ("matmul", "grouped_matmul", "flash_attention", "flash_attention_grad") and fractal:
        return Estimate(formula=f"{formula}: fractal (NZ) layout, logical shape not recoverable")
    if formula == "matmul":
        return _matmul(ins, outs)
    if formula == "grouped_matmul":
        return _grouped_matmul(ins, outs)
    if formula == "flash_attention":
        return _flash_attention(ins, outs, 1.0, "flash attention")
    if formula == "flash_attention_grad":
        return _flash_attention(ins, outs, 2.5, "flash attention grad")
    if formula == "no_shape_flops":
        return Estimate(formula=f"{kernel_type}: the KV length is not in its shapes")
    if op_type in VECTOR_OP_TYPES and outs:
        elements = sum(numel(s) for s in outs if s is not None)
        if elements:
            per = knowledge.load("model_shapes")["vector_flops_per_element"]
            return Estimate(float(elements * per), "vector", f"{per} op per output element ({elements})", "low")
    return Estimate()


FLOPS_INPUTS = ["type", "op_type", "input_shapes", "output_shapes", "input_formats", "input_dtypes", "output_dtypes"]


def shape_flops(ops: pd.DataFrame) -> pd.DataFrame:
    """FLOPS_COLUMNS for each row of ``ops`` (one row per distinct kernel + shapes + dtypes); worked
    out once per distinct FLOPs input (collectives differ by name only, per call)."""
    codes = ops[FLOPS_INPUTS].groupby(FLOPS_INPUTS, sort=False, dropna=False).ngroup().to_numpy()
    distinct = ops.iloc[first_rows(codes, int(codes.max()) + 1 if len(codes) else 0)]
    rows = []
    for kernel_type, op_type, ins, outs, formats, in_dtypes, out_dtypes in zip(
        *(distinct[column] for column in FLOPS_INPUTS)
    ):
        found = estimate(kernel_type, op_type, ins, outs, formats)
        dtypes = parse_dtypes(in_dtypes)
        in_bytes = tensor_bytes(parse_shapes(ins), dtypes)
        out_bytes = tensor_bytes(parse_shapes(outs), parse_dtypes(out_dtypes))
        moved = in_bytes + out_bytes if in_bytes is not None and out_bytes is not None else None
        rows.append(
            (
                found.flops,
                moved if moved else None,
                found.kind,
                compute_dtype(dtypes) if found.kind == "cube" else None,
                found.formula or None,
                found.confidence,
            )
        )
    per_distinct = pd.DataFrame(rows, columns=list(FLOPS_COLUMNS))
    frame = per_distinct.iloc[codes].set_axis(ops.index)
    for column in ("flops_per_call", "bytes_per_call"):
        frame[column] = frame[column].astype(np.float64)
    return frame
