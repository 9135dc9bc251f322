"""Layers of steps that repeat, worked out once: a decode capture has tens of thousands of steps of
a handful of distinct shapes, and ``step_layers`` costs a few hundred µs of Python per step.

Two steps get the same layers (relative to their start) when every input ``step_layers`` reads
is the same: per event the kernel identity and the flags it tests (anchor, backward, opening,
closing, selection, sampling, pass marker), and the layer templates carried in from earlier steps
(offsets, and the kernel sequence of each template layer). The memo key is a digest of exactly
those; a hit replays the stored layers and template updates shifted to the step's start.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from npuprof.pipeline.segmentation.features import EventFeatures
from npuprof.pipeline.stages.segment.layers import Layer, StepLayers, step_layers

_POSITION_TEMPLATES = (False, True)  # template layers kept as (start, end) positions
_OFFSET_TEMPLATES = ("forward_offset", "backward_offset")


def _digest(values: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(values).tobytes(), digest_size=16).digest()


def _shifted(layer: Layer, by: int) -> Layer:
    return Layer(
        layer.start + by,
        layer.end + by,
        layer.anchor + by,
        layer.direction,
        layer.run,
        layer.boundary_source,
        layer.role,
        layer.pass_index,
        layer.layer_index,
    )


class StepLayerMemo:
    """``step_layers`` of one rank's steps, computed once per distinct (step content, templates)."""

    def __init__(self, anchor_mask: np.ndarray, features: EventFeatures, family: str, gaps: dict[bool, int]):
        self.anchor_mask, self.features, self.family, self.gaps = anchor_mask, features, family, gaps
        flags = [
            features.kernel_key,
            anchor_mask,
            features.backward,
            features.opening,
            features.closing,
            features.role_flags["selection"],
            features.role_flags["sampling"],
            features.pass_marker,
        ]
        codes = pd.DataFrame({str(i): np.asarray(f, dtype=np.int64) for i, f in enumerate(flags)})
        self.codes = codes.groupby(list(codes.columns), sort=False).ngroup().to_numpy(np.int64)
        self.results: dict[tuple, tuple[list[Layer], dict, str, str]] = {}

    def _template_key(self, templates: dict) -> tuple:
        spans = [templates.get(key) for key in _POSITION_TEMPLATES]
        regions = tuple(_digest(self.features.kernel_key[span[0] : span[1] + 1]) if span else None for span in spans)
        return regions + tuple(templates.get(key) for key in _OFFSET_TEMPLATES)

    def layers(self, start: int, end: int, templates: dict) -> StepLayers:
        """The layers of step [start, end]; ``templates`` is updated as ``step_layers`` would."""
        key = (end - start, _digest(self.codes[start : end + 1]), self._template_key(templates))
        stored = self.results.get(key)
        if stored is None:
            before = dict(templates)
            found = step_layers(start, end, self.anchor_mask, self.features, self.family, self.gaps, templates)
            relative = [_shifted(x, -start) for x in found.layers]
            changed = {k: v for k, v in templates.items() if before.get(k) != v}
            changed = {k: (v[0] - start, v[1] - start) if k in _POSITION_TEMPLATES else v for k, v in changed.items()}
            self.results[key] = (relative, changed, found.family, found.confidence)
            found.structure = key
            return found
        relative, changed, family, confidence = stored
        for name, value in changed.items():
            templates[name] = (value[0] + start, value[1] + start) if name in _POSITION_TEMPLATES else value
        return StepLayers([_shifted(x, start) for x in relative], family, confidence, key)
