"""Transformer layers inside one step, in time linear in the step's events.

One anchor event (the attention core of the rank's attention family) is one layer instance.
Consecutive anchors of one direction with the same event distance form a *run* (the layers of
one forward or backward pass). Inside a run every layer has the same kernel sequence, so one cut
offset serves all of them: for a forward run the cut goes before the event that opens a layer (a
norm or fused add-norm) at a fixed distance before each anchor; for a backward run, after the
norm-grad that closes it at a fixed distance after each anchor. The offset chosen is the one that
fits every layer of the run, the first (forward) or last (backward) included, which is what tells
the input norm apart from the post-attention norm. Rows between runs are interludes (loss,
embedding grad, pipeline send/recv); rows before the first and after the last layer are the
step's head and tail. Layer counts are observed, never assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.segmentation.features import EventFeatures


@dataclass
class Layer:
    start: int
    end: int
    anchor: int
    direction: str  # forward | backward
    run: int
    boundary_source: str  # opening_norm | closing_norm_grad | template | anchor
    role: str = ""  # forward | backward | recompute
    pass_index: int = 0
    layer_index: int = 0


@dataclass
class StepLayers:
    layers: list[Layer]
    family: str
    confidence: str  # high | medium | low | none
    structure: tuple | None = None  # steps of equal structure have the same layers (see step_memo)


def choose_family(features: EventFeatures) -> tuple[str, np.ndarray]:
    """The attention family (or union of families) that anchors this rank's layers, and the anchor mask.

    Layer-start families (MLA, linear attention) dominate: when present, their union anchors the
    layers and the flash / sparse kernels inside those layers are not counted again (hybrid
    MLA + KDA models use the union). Otherwise the present non-generic families together anchor
    (DSV4 alternates sparse CSA and flash HCA layers), and generic attention only as a last resort.
    """
    rules = knowledge.load("segmentation_rules")["attention_families"]
    present = {fam for fam in pd.unique(features.anchor_family) if fam}  # hashing, not sorting, the events
    ordered = [f["family"] for f in rules if f["family"] in present]
    starts = [f["family"] for f in rules if f["layer_start"] and f["family"] in present]
    chosen = starts or [f for f in ordered if f != "generic"] or ordered
    if not chosen:
        return "", np.zeros(len(features.anchor_family), dtype=bool)
    name = chosen[0] if len(chosen) == 1 else "hybrid:" + "+".join(chosen)
    # as objects: a text Series would first check every event's Python string
    return name, pd.Series(features.anchor_family, dtype=object).isin(chosen).to_numpy()


def fallback_anchors(features: EventFeatures) -> np.ndarray:
    """Without attention: fallback anchors only where the kernel sequence repeats exactly.

    Every ``p``-th candidate (p = 1, 2, ...) is tried as the layer anchor; it is accepted when the
    kernels between consecutive anchors are the same sequence at least ``min_periods`` times and
    for most anchor pairs (steps and head / tail kernels break a few). The smallest such period
    wins, so two matmuls of one MLP block do not become two "layers".
    """
    rules = knowledge.load("segmentation_rules")["fallback_anchors"]
    positions = np.flatnonzero(features.fallback)
    keys = features.kernel_key
    none = np.zeros(len(features.fallback), dtype=bool)
    if len(positions) < rules["min_periods"] + 1:
        return none
    for period in range(1, rules["max_period"] + 1):
        anchors = positions[::period]
        if len(anchors) < rules["min_periods"] + 1:
            break
        windows = [keys[a:b].tobytes() for a, b in zip(anchors[:-1], anchors[1:])]  # one per anchor pair, not per event
        values, counts = np.unique(np.array(windows, dtype=object), return_counts=True)
        best = int(counts.max())
        if best >= rules["min_periods"] and best >= rules["min_pair_share"] * len(windows):
            mask = none.copy()
            mask[anchors] = True
            return mask
    return none


def _best_offset(anchors: np.ndarray, lower: int, upper: int, boundary: np.ndarray, forward: bool) -> tuple[int, int]:
    """(offset, layers it fits) of the run's cut.

    Forward: the event ``offset`` before each anchor must open a layer (and the one before it must
    not, so the cut is not inside a run of norms). Backward: the event ``offset`` after each anchor
    must close a layer, and the one after it must not. Several offsets can fit: a QK-norm model
    has norms at the layer start and just before attention, and the post-attention norm of the
    previous layer also precedes the next anchor. The outermost layer of the run (the first one
    going forward, the last one going backward) sits next to the step's head or an interlude and
    tells them apart: the offset must fit it, and among those the largest offset that fits at least
    half of the layers wins (an inserted kernel may break a few layers; they are fixed one by one).
    Every offset is scored at once: offsets × anchors is at most the run's event count.
    """
    n = len(boundary)
    if len(anchors) > 1:
        limit = int(np.min(np.diff(anchors))) - 1
    else:
        limit = anchors[0] - lower if forward else upper - anchors[-1]
    offsets = np.arange(max(limit, 0) + 1)
    pos = anchors[None, :] - offsets[:, None] if forward else anchors[None, :] + offsets[:, None]
    neighbour = pos - 1 if forward else pos + 1
    inside = (pos >= lower) & (pos <= upper)
    neighbour_inside = (neighbour >= lower) & (neighbour <= upper)
    fits = inside & boundary[np.clip(pos, 0, n - 1)] & ~(boundary[np.clip(neighbour, 0, n - 1)] & neighbour_inside)
    scores = fits.sum(axis=1)
    outer = fits[:, 0] if forward else fits[:, -1]
    share = knowledge.load("segmentation_rules")["offset_min_fit_share"]
    # the outermost layer neighbours the head or an interlude, where any norm may sit: an offset must
    # also fit another layer of the run to count (in a run of two, half would be the outer one alone)
    needed = max(math.ceil(share * len(anchors)), min(len(anchors), 2))
    eligible = np.flatnonzero(outer & (scores >= needed))
    if eligible.size:
        chosen = int(eligible[-1])  # the largest eligible offset
    else:
        chosen = int(np.flatnonzero(scores == scores.max())[-1])  # the best score, then the largest offset
    return chosen, int(scores[chosen])


def _template_extent(
    keys: np.ndarray,
    template_start: int,
    template_end: int,
    at: int,
    bound: int,
    step: int,
    skip: np.ndarray | None = None,
) -> int:
    """How far a layer starting (step=+1) / ending (step=-1) at ``at`` matches the template layer.
    Rows in ``skip`` (communication another stream runs: a gradient bucket's all-reduce lands wherever
    its start falls among a layer's kernels) are matched on neither side."""
    template = np.arange(template_start, template_end + 1)
    if skip is not None:
        template = template[~skip[template]]
    reach = 2 * (template_end - template_start + 1)  # enough rows to hold the template's kernels
    if step > 0:
        rows = np.arange(at, min(bound, at + reach) + 1)
    else:
        rows = np.arange(at, max(bound, at - reach) - 1, -1)
        template = template[::-1]
    if skip is not None:
        rows = rows[~skip[rows]]
    limit = min(len(template), len(rows))
    if limit <= 0:
        return at - step
    miss = np.flatnonzero(keys[rows[:limit]] != keys[template[:limit]])
    matched = int(miss[0]) if miss.size else limit
    if not matched:
        return at - step
    extent = int(rows[matched - 1])
    if skip is not None and matched == len(template):
        # the whole template matched: take the skipped rows it ends with (a MoE layer's combine) too
        edge = template_end if step > 0 else template_start
        while skip[edge] and skip[extent + step] and (extent + step - bound) * step <= 0:
            edge, extent = edge - step, extent + step
    return extent


def _runs_of(anchors: np.ndarray, features: EventFeatures, modal_gap: dict[bool, int]) -> list[np.ndarray]:
    """Split anchors into runs: same direction, the modal distance (give or take a few inserted
    kernels), and no pass marker (send/recv, embedding, sampling, optimizer) in between."""
    backward = features.backward[anchors]
    inserted = knowledge.load("segmentation_rules")["max_inserted_events"]
    prev, cur = anchors[:-1], anchors[1:]
    modal = np.where(backward[1:], modal_gap.get(True, -1), modal_gap.get(False, -1))
    distance = cur - prev
    same_pass = (
        (backward[:-1] == backward[1:])
        & (modal <= distance)
        & (distance <= modal + inserted)
        & (features.markers_before[cur] == features.markers_before[prev + 1])
    )
    return np.split(anchors, np.flatnonzero(~same_pass) + 1)


def _fits(pos: int, lower: int, upper: int, boundary: np.ndarray, forward: bool) -> bool:
    if not lower <= pos <= upper or not boundary[pos]:
        return False
    neighbour = pos - 1 if forward else pos + 1
    return not (lower <= neighbour <= upper and boundary[neighbour])


def _cuts(
    run: np.ndarray, lower: int, upper: int, boundary: np.ndarray, forward: bool, known: int | None
) -> tuple[np.ndarray, bool, int]:
    """Per-layer cut positions (forward: first event; backward: last event), whether all fit, and the offset.

    One offset serves the run; a layer it does not fit (a kernel inserted into that layer) gets the
    nearest offset that does, within its own anchor distance. A lone layer (an MTP draft layer, a
    pass of one) reuses the offset learnt from a longer run when it fits.
    """
    d, score = _best_offset(run, lower, upper, boundary, forward)
    if len(run) == 1 and known is not None:
        pos = int(run[0] - known if forward else run[0] + known)
        if _fits(pos, lower, upper, boundary, forward):
            d, score = known, 1
    cuts = run - d if forward else run + d
    all_fit = score == len(run)
    if 0 < score < len(run):
        for k, anchor in enumerate(run):
            if _fits(int(cuts[k]), lower, upper, boundary, forward):
                continue
            if forward:
                floor = run[k - 1] + 1 if k else lower
                candidates = [c for c in range(anchor, floor - 1, -1) if _fits(c, floor, upper, boundary, True)]
            else:
                ceiling = run[k + 1] - 1 if k + 1 < len(run) else upper
                candidates = [c for c in range(anchor, ceiling + 1) if _fits(c, lower, ceiling, boundary, False)]
            if candidates:
                cuts[k] = min(candidates, key=lambda c: abs(abs(c - anchor) - d))
        all_fit = all(_fits(int(c), lower, upper, boundary, forward) for c in cuts)
    return cuts, all_fit, d


def _cuts_past(
    skip: np.ndarray,
    run: np.ndarray,
    lower: int,
    upper: int,
    boundary: np.ndarray,
    forward: bool,
    known: int | None,
) -> tuple[np.ndarray, bool, int]:
    """``_cuts`` counting only the events not in ``skip``: a communication op another stream runs (a
    gradient bucket's all-reduce queued behind a wait) lands among a layer's kernels wherever its start
    falls, and would move that layer's cut off the offset every other layer keeps. The cuts are
    positions of the whole sequence; with nothing skipped they are ``_cuts``'."""
    kept = lower + np.flatnonzero(~skip[lower : upper + 1])
    local_run = np.searchsorted(kept, run)
    cuts, all_fit, offset = _cuts(local_run, 0, len(kept) - 1, boundary[kept], forward, known)
    # an offset can put a cut before the first kept event: clipped, never wrapped to the last by numpy
    return kept[np.clip(cuts, 0, len(kept) - 1)], all_fit, offset


def _modal_length(lengths: np.ndarray) -> int:
    values, counts = np.unique(lengths, return_counts=True)
    return int(values[np.argmax(counts)])


def modal_gaps(anchor_mask: np.ndarray, backward: np.ndarray) -> dict[bool, int]:
    """The most common event distance between consecutive same-direction anchors, per direction."""
    anchors = np.flatnonzero(anchor_mask)
    gaps: dict[bool, int] = {}
    if len(anchors) < 2:
        return gaps
    diffs = np.diff(anchors)
    same = backward[anchors[1:]] == backward[anchors[:-1]]
    for direction in (False, True):
        sel = diffs[same & (backward[anchors[1:]] == direction)]
        if sel.size:
            values, counts = np.unique(sel, return_counts=True)
            gaps[direction] = int(values[np.argmax(counts)])
    return gaps


def step_layers(
    start: int,
    end: int,
    anchor_mask: np.ndarray,
    features: EventFeatures,
    family: str,
    gaps: dict[bool, int],
    templates: dict,
) -> StepLayers:
    """Layers of the step [start, end]. ``templates`` carries per-direction layer templates across steps."""
    anchors = np.flatnonzero(anchor_mask[start : end + 1]) + start
    if anchors.size == 0:
        return StepLayers([], family, "none")
    keys, comm = features.kernel_key, features.floating_communication
    layers: list[Layer] = []
    lower = start
    runs = _runs_of(anchors, features, gaps)
    fitted_all = True
    for run_index, run in enumerate(runs):
        forward = not bool(features.backward[run[0]])
        upper = (runs[run_index + 1][0] - 1) if run_index + 1 < len(runs) else end
        if forward:
            starts, fit, offset = _cuts_past(
                comm, run, lower, upper, features.opening, True, templates.get("forward_offset")
            )
            if len(run) > 1:
                templates["forward_offset"] = offset
            starts = np.maximum(starts, lower)
            ends = np.append(starts[1:] - 1, upper)
            if len(run) > 1:
                k = int(np.flatnonzero((ends - starts)[:-1] + 1 == _modal_length((ends - starts)[:-1] + 1))[-1])
                templates[False] = (int(starts[k]), int(ends[k]))
            if templates.get(False):
                ends[-1] = max(_template_extent(keys, *templates[False], int(starts[-1]), upper, +1, comm), run[-1])
            source = "opening_norm" if fit else "template"
            for k in range(len(run)):
                layers.append(Layer(int(starts[k]), int(ends[k]), int(run[k]), "forward", run_index, source))
        else:
            stops, fit, offset = _cuts_past(
                comm, run, lower, upper, features.closing, False, templates.get("backward_offset")
            )
            if len(run) > 1:
                templates["backward_offset"] = offset
            stops = np.minimum(stops, upper)
            starts = np.insert(stops[:-1] + 1, 0, lower)
            if len(run) > 1:
                k = 1 + int(np.flatnonzero((stops - starts)[1:] + 1 == _modal_length((stops - starts)[1:] + 1))[0])
                templates[True] = (int(starts[k]), int(stops[k]))
            if templates.get(True):
                starts[0] = min(_template_extent(keys, *templates[True], int(stops[0]), lower, -1, comm), run[0])
            source = "closing_norm_grad" if fit else "template"
            for k in range(len(run)):
                layers.append(Layer(int(starts[k]), int(stops[k]), int(run[k]), "backward", run_index, source))
        fitted_all &= fit
        lower = layers[-1].end + 1
    _assign_passes(layers, _marked_runs(runs, features))
    _mark_speculative(layers, features, start, end)
    return StepLayers(layers, family, "high" if fitted_all else "medium")


def _marked_runs(runs: list[np.ndarray], features: EventFeatures) -> set[int]:
    """The runs a pass marker (send / recv, embedding, sampling, optimizer) separates from the run before."""
    return {
        index
        for index in range(1, len(runs))
        if features.markers_before[runs[index][0]] != features.markers_before[runs[index - 1][-1] + 1]
    }


def _assign_passes(layers: list[Layer], marked_runs: set[int] = frozenset()) -> None:
    """Group layers into passes (a pass continues while layers abut in one direction and no pass marker
    separates their runs: a pipeline stage's micro-batches abut when the work between them is folded
    into a layer), mark recompute."""
    if not layers:
        return
    pass_index = 0
    pass_start = 0
    for i, layer in enumerate(layers):
        new_run = i and layer.run != layers[i - 1].run and layer.run in marked_runs
        if i and (layer.direction != layers[i - 1].direction or layer.start != layers[i - 1].end + 1 or new_run):
            _index_pass(layers[pass_start:i])
            pass_index += 1
            pass_start = i
        layer.pass_index = pass_index
    _index_pass(layers[pass_start:])
    # A short forward pass sandwiched between backward passes is activation recomputation.
    by_pass: dict[int, list[Layer]] = {}
    for layer in layers:
        by_pass.setdefault(layer.pass_index, []).append(layer)
    passes = [by_pass[p] for p in sorted(by_pass)]
    typical = max((len(p) for p in passes if p[0].direction == "forward"), default=0)
    for i, members in enumerate(passes):
        direction = members[0].direction
        role = direction
        if direction == "forward" and 0 < i < len(passes) - 1 and len(members) < typical:
            if passes[i - 1][0].direction == "backward" and passes[i + 1][0].direction == "backward":
                role = "recompute"
        for layer in members:
            layer.role = role


def _mark_speculative(layers: list[Layer], features: EventFeatures, start: int, end: int) -> None:
    """Inference steps sample after the main layers; layers after that (MTP / Eagle draft) are speculative."""
    selection = features.role_flags["selection"][start : end + 1] | features.role_flags["sampling"][start : end + 1]
    hits = np.flatnonzero(selection)
    if not hits.size or features.backward[start : end + 1].any():
        return
    first_selection = start + int(hits[0])
    for layer in layers:
        if layer.start > first_selection:
            layer.role = "speculative"


def _index_pass(members: list[Layer]) -> None:
    """Layer index within a pass, in forward order (a backward pass runs the last layer first)."""
    n = len(members)
    for k, layer in enumerate(members):
        layer.layer_index = k if layer.direction == "forward" else n - 1 - k
