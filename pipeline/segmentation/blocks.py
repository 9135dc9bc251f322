"""Blocks of a layer: attention, then FFN or MoE (reversed in a backward layer).

The split is structural, not a midpoint: a forward layer's second block opens at the first
opening event (post-attention norm / fused add-norm) after the attention core; a backward layer's
attention grads start after the last norm-grad before its attention core. Without such an event
the split goes right after the last attention kernel (before it, going backward).
"""

from __future__ import annotations

import numpy as np

from npuprof import knowledge
from npuprof.pipeline.segmentation.features import EventFeatures


def split_layer(
    start: int, end: int, anchor: int, direction: str, features: EventFeatures, has_attention: bool = True
) -> list[tuple[int, int, str]]:
    """(start, end, kind) of the blocks of one layer, in device order.

    A layer without attention (found by a fallback anchor) is one block of its own kind: it gets
    no attention block.
    """
    if not has_attention:
        return [(start, end, _rest_kind(start, end, features))]
    attention = features.role_flags["attention"] | features.role_flags["attention_aux"]
    if direction == "forward":
        after = np.flatnonzero(features.opening[anchor + 1 : end + 1])
        if after.size:
            split = anchor + 1 + int(after[0])
        else:
            attn = np.flatnonzero(attention[start : end + 1])
            split = start + int(attn[-1]) + 1 if attn.size else end + 1
        parts = [(start, split - 1, "attention"), (split, end, None)]
    else:
        before = np.flatnonzero(features.closing[start:anchor])
        if before.size:
            split = start + int(before[-1])
        else:
            attn = np.flatnonzero(attention[start : end + 1])
            split = start + int(attn[0]) - 1 if attn.size else end
        parts = [(start, split, None), (split + 1, end, "attention")]
    blocks = []
    for lo, hi, kind in parts:
        if hi < lo:
            continue
        if kind is None:
            kind = _rest_kind(lo, hi, features)
        blocks.append((lo, hi, kind))
    return blocks


def _rest_kind(lo: int, hi: int, features: EventFeatures) -> str:
    """The non-attention block: moe if it routes tokens to experts, aicpu if mostly AI CPU, else ffn."""
    window = slice(lo, hi + 1)
    if features.role_flags["moe"][window].any():
        return "moe"
    if features.role_flags["aicpu"][window].mean() >= knowledge.load("segmentation_rules")["blocks"]["aicpu_min_share"]:
        return "aicpu"
    if features.role_flags["ffn"][window].any() or features.role_flags["compute"][window].any():
        return "ffn"
    return "other"
