"""Forwards nothing sampled: in a capture without step marks an inference step ends at its sampling, so a
forward whose output nobody samples — a data-parallel rank's dummy forward, run without requests to keep
its expert exchanges in step with its peers (vLLM's ``_dummy_run``) — would join the next forward's
step. A window that holds k times the layers of the rank's shortest forward (k ≥ 2) is k forwards: it is
cut k − 1 times, each at the longest device idle between the last attention call of one forward and the
first of the next (where the host prepares the next batch)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from npuprof.pipeline.stages.segment.layers import Layer
from npuprof.pipeline.stages.segment.steps import StepWindow


def _forward_layers(layers: list[Layer]) -> list[Layer]:
    return [layer for layer in layers if layer.role == "forward"]


def _cuts(layers: list[Layer], per_forward: int, start_ns: np.ndarray, end_ns: np.ndarray) -> list[int]:
    """The first event of each forward after the first: the event after the longest idle between the
    anchors of one forward's last layer and the next forward's first."""
    cuts = []
    for first in range(per_forward, len(layers), per_forward):
        lo, hi = layers[first - 1].anchor, layers[first].anchor
        idle = start_ns[lo + 1 : hi + 1] - np.maximum.accumulate(end_ns[lo:hi])
        cuts.append(lo + 1 + int(np.argmax(idle)))
    return cuts


def split_unsampled_forwards(
    windows: list[StepWindow],
    layers_of: Callable[[StepWindow], list[Layer]],
    start_ns: np.ndarray,
    end_ns: np.ndarray,
) -> list[StepWindow]:
    """``windows`` (an inference rank's, found from structure) with each complete one that holds several
    forwards cut into them (``layers_of``: a window's layers; ``start_ns`` / ``end_ns``: per event in
    device order), renumbered."""
    counts = [len(_forward_layers(layers_of(window))) if window.complete else 0 for window in windows]
    per_forward = min((n for n in counts if n), default=0)
    if not per_forward or all(n <= per_forward for n in counts):
        return windows
    found: list[StepWindow] = []
    for window, count in zip(windows, counts):
        if count < 2 * per_forward or count % per_forward:
            found.append(window)
            continue
        bounds = [window.start, *_cuts(_forward_layers(layers_of(window)), per_forward, start_ns, end_ns)]
        ends = [*(cut - 1 for cut in bounds[1:]), window.end]
        found += [StepWindow(0, None, start, end, window.source) for start, end in zip(bounds, ends)]
    for ordinal, window in enumerate(found):
        window.ordinal = ordinal
    return found
