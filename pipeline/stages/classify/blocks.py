"""Blocks of a layer: attention, then FFN or MoE (reversed in a backward layer).

The split is structural, not a midpoint: a forward layer's second block opens at the first
opening event (post-attention norm / fused add-norm) after the attention core; a backward layer's
attention grads start after the last norm-grad before its attention core. Without such an event
the split goes right after the last attention kernel (before it, going backward).

Every layer of a rank is split at once: the split points are sorted searches into the positions
of the opening, closing and attention events, and block kinds are prefix-sum counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npuprof import knowledge
from npuprof.pipeline.segmentation.features import EventFeatures
from npuprof.pipeline.segmentation.windows import window_reduce


@dataclass
class LayerBlocks:
    """The blocks of many layers, in layer order and device order inside a layer."""

    layer: np.ndarray  # index of the layer (into the arrays given to ``split_layers``)
    ordinal: np.ndarray  # block ordinal inside its layer
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray  # attention | ffn | moe | aicpu | other


def _first_at_or_after(positions: np.ndarray, at: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """The first of ``positions`` in [at, limit] per row, else -1."""
    index = np.searchsorted(positions, at, side="left")
    found = positions[np.minimum(index, len(positions) - 1)] if len(positions) else np.full(len(at), -1)
    return np.where((index < len(positions)) & (found <= limit), found, -1)


def _last_at_or_before(positions: np.ndarray, at: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """The last of ``positions`` in [limit, at] per row, else -1."""
    index = np.searchsorted(positions, at, side="right") - 1
    found = positions[np.maximum(index, 0)] if len(positions) else np.full(len(at), -1)
    return np.where((index >= 0) & (found >= limit), found, -1)


def split_layers(
    starts: np.ndarray,
    ends: np.ndarray,
    anchors: np.ndarray,
    backward: np.ndarray,
    has_attention: np.ndarray,
    features: EventFeatures,
) -> LayerBlocks:
    """The blocks of every layer [starts[i], ends[i]] around its anchor.

    A layer without attention (found by a fallback anchor) is one block of its own kind: it gets
    no attention block.
    """
    starts, ends, anchors = (np.asarray(a, dtype=np.int64) for a in (starts, ends, anchors))
    backward, has_attention = np.asarray(backward, dtype=bool), np.asarray(has_attention, dtype=bool)
    attention = np.flatnonzero(features.role_flags["attention"] | features.role_flags["attention_aux"])
    opening = _first_at_or_after(np.flatnonzero(features.opening), anchors + 1, ends)
    last_attention = _last_at_or_before(attention, ends, starts)
    forward_split = np.where(opening >= 0, opening, np.where(last_attention >= 0, last_attention + 1, ends + 1))
    closing = _last_at_or_before(np.flatnonzero(features.closing), anchors - 1, starts)
    first_attention = _first_at_or_after(attention, starts, ends)
    backward_split = np.where(closing >= 0, closing, np.where(first_attention >= 0, first_attention - 1, ends))
    # two candidate parts per layer: forward (attention, rest), backward (rest, attention)
    first_end = np.where(backward, backward_split, forward_split - 1)
    second_start = first_end + 1
    first_end = np.where(has_attention, first_end, ends)  # a layer without attention is one block
    part_start = np.stack([starts, second_start], axis=1).ravel()
    part_end = np.stack([first_end, ends], axis=1).ravel()
    is_attention = np.stack([~backward, backward], axis=1).ravel() & np.repeat(has_attention, 2)
    keep = (part_end >= part_start) & np.stack([np.ones_like(has_attention), has_attention], axis=1).ravel()
    layer = np.repeat(np.arange(len(starts)), 2)[keep]
    part_start, part_end, is_attention = part_start[keep], part_end[keep], is_attention[keep]
    ordinal = np.arange(len(layer)) - np.searchsorted(layer, layer, side="left")
    kind = np.where(is_attention, "attention", _rest_kinds(part_start, part_end, features)).astype(object)
    return LayerBlocks(layer, ordinal, part_start, part_end, kind)


def _rest_kinds(lo: np.ndarray, hi: np.ndarray, features: EventFeatures) -> np.ndarray:
    """The non-attention block: moe if it routes tokens to experts, aicpu if mostly AI CPU, else ffn."""
    flags = features.role_flags

    def count(mask: np.ndarray) -> np.ndarray:
        return window_reduce(np.add, mask.astype(np.int64), lo, hi)

    share = knowledge.load("segmentation_rules")["blocks"]["aicpu_min_share"]
    length = np.maximum(hi - lo + 1, 1)
    return np.select(
        [count(flags["moe"]) > 0, count(flags["aicpu"]) / length >= share, count(flags["ffn"] | flags["compute"]) > 0],
        ["moe", "aicpu", "ffn"],
        "other",
    )
