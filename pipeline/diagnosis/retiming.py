"""What a cause costs: re-time each step with the cause removed and measure how much shorter it gets.

The model (docs/architecture.md, "Recoverable time"): each rank's step is local work — compute and
idle — between the collectives it joins; a collective ends when its last member arrives plus its
transit, and every member leaves it then. Replaying the measured step through the model gives a
baseline; replaying it with one cause removed (a rank's work at its peers' median, an idle window
closed, a transit shortened) gives the what-if, and the difference per step is the finding's
``recoverable_ms_per_step``. Because both runs go through the same model, its simplifications
(collectives overlapping compute are treated as blocking) mostly cancel.

The replay loops over collective instances (not events), each step independently: thousands per
step at most, each a few array reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

ALIGNMENT_COLUMNS = (
    "alignment_id",
    "rank_id",
    "start_us",
    "end_us",
    "corrected_start_us",
    "corrected_end_us",
)
STEP_COLUMNS = ("rank_id", "step_ordinal", "step_id", "start_us", "end_us")


@dataclass(frozen=True)
class StepModel:
    """The measured steps as the replay reads them.

    ``slots``: one row per (rank, step) — rank_id, step_key, start_us / end_us (own clock),
    corrected_start_us, tail_us (work after its last collective).
    ``rows``: one row per (collective instance, member rank) in replay order — instance (index into
    ``transit_us``), slot, rank_id, start_us / end_us (own clock), gap_us (local work since the
    rank's previous collective ended, or since its step started).
    ``bounds``: row offsets of each instance in ``rows``; ``instance_ids`` their alignment ids.
    """

    slots: pd.DataFrame
    rows: pd.DataFrame
    bounds: np.ndarray
    transit_us: np.ndarray
    instance_ids: np.ndarray

    @property
    def empty(self) -> bool:
        return self.slots.empty

    @cached_property
    def baseline_walls(self) -> pd.Series:
        """The measured steps replayed unchanged (each finding's what-if is compared with it)."""
        return step_walls(self)


@dataclass
class WhatIf:
    """A change to the measured step: local work cut per row and per slot tail, transit per instance."""

    gap_cut_us: np.ndarray
    tail_cut_us: np.ndarray
    transit_us: np.ndarray

    @classmethod
    def none(cls, model: StepModel) -> "WhatIf":
        return cls(np.zeros(len(model.rows)), np.zeros(len(model.slots)), model.transit_us.copy())


def build_step_model(alignment: pd.DataFrame, steps: pd.DataFrame) -> StepModel:
    """The replay model of the steps in ``steps`` (step_summary rows) from ``collective_alignment``."""
    slots = _slots(steps)
    if slots.empty:
        return _empty_model(slots)
    if not set(ALIGNMENT_COLUMNS) <= set(alignment.columns):  # no collectives (one rank, no cross_rank)
        alignment = pd.DataFrame(columns=list(ALIGNMENT_COLUMNS))
    rows = alignment[list(ALIGNMENT_COLUMNS)].dropna(subset=["start_us", "end_us", "corrected_start_us"])
    rows = rows[rows["rank_id"].isin(slots["rank_id"])]
    offsets = (rows["start_us"] - rows["corrected_start_us"]).groupby(rows["rank_id"]).median()
    slots["corrected_start_us"] = slots["start_us"] - slots["rank_id"].map(offsets).fillna(0.0)
    rows = rows.assign(slot=_slot_of(rows, slots))
    rows = rows[rows["slot"] >= 0]
    if rows.empty:
        slots["tail_us"] = slots["end_us"] - slots["start_us"]
        return _empty_model(slots)
    rows = rows.sort_values(["slot", "start_us"], kind="stable")
    previous_end = rows.groupby("slot")["end_us"].shift().to_numpy()
    since = np.where(np.isnan(previous_end), slots["start_us"].to_numpy()[rows["slot"]], previous_end)
    rows["gap_us"] = np.clip(rows["start_us"].to_numpy() - since, 0.0, None)
    last_end = rows.groupby("slot")["end_us"].max().reindex(slots.index)
    slots["tail_us"] = np.clip(slots["end_us"] - last_end.fillna(slots["start_us"]), 0.0, None)
    per_instance = rows.groupby("alignment_id").agg(
        first_end=("corrected_end_us", "min"),
        last_arrival=("corrected_start_us", "max"),
        mean_end=("corrected_end_us", "mean"),
    )
    per_instance = per_instance.sort_values("first_end", kind="stable")
    order = pd.Series(np.arange(len(per_instance)), index=per_instance.index)
    rows["instance"] = order.reindex(rows["alignment_id"]).to_numpy()
    rows = rows.sort_values(["instance", "rank_id"], kind="stable").reset_index(drop=True)
    counts = np.bincount(rows["instance"].to_numpy(), minlength=len(per_instance))
    transit = np.clip((per_instance["mean_end"] - per_instance["last_arrival"]).to_numpy(), 0.0, None)
    return StepModel(slots, rows, np.concatenate([[0], np.cumsum(counts)]), transit, per_instance.index.to_numpy())


def step_walls(model: StepModel, what_if: WhatIf | None = None) -> pd.Series:
    """Replayed wall (µs) of each step: the mean over its ranks of each rank's step wall (as step_summary
    measures it; pipeline stages start their steps at different times, so a span across ranks would
    count the stagger). A rank's next step starts when its previous one ends plus the measured time
    between them: a change that delays or hastens one step moves the rank's later steps with it (a
    pipeline stage's step begins with its wait for the stage before, so fixed starts would misprice it)."""
    change = what_if or WhatIf.none(model)
    clock = model.slots["corrected_start_us"].to_numpy(float).tolist()
    tail = (model.slots["tail_us"].to_numpy(float) - change.tail_cut_us).clip(0.0).tolist()
    previous, between = _previous_slots(model.slots)
    started = [p < 0 for p in previous]
    starts = list(clock)
    slot = model.rows["slot"].to_numpy().tolist() if len(model.rows) else []
    gap = (model.rows["gap_us"].to_numpy(float) - change.gap_cut_us).clip(0.0).tolist() if len(model.rows) else []
    transit, bounds = change.transit_us.tolist(), model.bounds.tolist()

    def start(s: int) -> None:  # a slot's clock from its rank's previous slot, on first use
        chain = []
        while not started[s]:
            chain.append(s)
            s = previous[s]
        for current in reversed(chain):
            before = previous[current]
            clock[current] = starts[current] = clock[before] + tail[before] + between[current]
            started[current] = True

    for instance in range(len(transit)):  # a loop over collective instances, in replay order
        members = range(bounds[instance], bounds[instance + 1])
        for k in members:
            start(slot[k])
        end = max(clock[slot[k]] + gap[k] for k in members) + transit[instance]
        for k in members:
            clock[slot[k]] = end
    for s in range(len(clock)):
        start(s)
    ends = np.asarray(clock) + np.asarray(tail)
    walls = model.slots.assign(wall=ends - np.asarray(starts))
    return walls.groupby("step_key")["wall"].mean()


def recoverable_ms(model: StepModel, what_if: WhatIf) -> float:
    """Mean over the modelled steps of (baseline − what-if) replayed wall, ms; never negative."""
    if model.empty:
        return 0.0
    saved = model.baseline_walls - step_walls(model, what_if)
    return max(float(saved.mean()) / 1000.0, 0.0)


def close_windows(model: StepModel, windows: pd.DataFrame) -> WhatIf:
    """Remove idle or exposed windows (rank_id, start_us on the rank's own clock, duration_us): each
    shortens the local work it falls in — before the rank's next collective, or its step's tail."""
    change = WhatIf.none(model)
    if model.empty or windows.empty:
        return change
    slot = _slot_of(windows, model.slots)
    inside = slot >= 0
    slot, start = slot[inside], windows["start_us"].to_numpy(float)[inside]
    cut = windows["duration_us"].to_numpy(float)[inside]
    # each window's collective: the first of its (rank, step) slot starting at or after it, found with
    # one sorted search over (slot, time since the slot's start) keys; none: the slot's tail
    by_slot = model.rows.sort_values(["slot", "start_us"])
    slot_start = model.slots["start_us"].to_numpy(float)
    width = float((model.slots["end_us"] - model.slots["start_us"]).max()) + 1.0
    row_slot = by_slot["slot"].to_numpy(np.int64)
    row_keys = row_slot * width + (by_slot["start_us"].to_numpy(float) - slot_start[row_slot])
    at = np.searchsorted(row_keys, slot * width + (start - slot_start[slot]))
    hit = at < len(row_keys)
    hit[hit] = row_slot[at[hit]] == slot[hit]
    np.add.at(change.gap_cut_us, by_slot.index.to_numpy()[at[hit]], cut[hit])
    np.add.at(change.tail_cut_us, slot[~hit], cut[~hit])
    return change


def at_peer_median(model: StepModel, rank: int, instances: np.ndarray | None = None) -> WhatIf:
    """``rank``'s local work before each collective at the median of the other members' (only where it
    is longer; ``instances``: alignment ids to change, default all the rank joins with peers, and then its
    tails too: a slow rank is slow after its last collective as well, e.g. in its optimizer)."""
    change = WhatIf.none(model)
    rows = model.rows
    if rows.empty:
        return change
    peers = rows[rows["rank_id"] != rank].groupby("instance")["gap_us"].median()
    mine = rows[(rows["rank_id"] == rank) & rows["instance"].isin(peers.index)]
    if instances is not None:
        mine = mine[mine["alignment_id"].isin(instances)]
    else:
        change.tail_cut_us = _tail_excess(model, rank)
    excess = (mine["gap_us"] - peers.reindex(mine["instance"]).to_numpy()).clip(lower=0.0)
    change.gap_cut_us[mine.index.to_numpy()] = excess.to_numpy()
    return change


def _tail_excess(model: StepModel, rank: int) -> np.ndarray:
    """Per slot, how much longer ``rank``'s tail is than the median tail of the ranks that left its last
    collective with it (its peers in the work that follows); 0 elsewhere."""
    last = model.rows.sort_values(["slot", "start_us"], kind="stable").groupby("slot")["instance"].last()
    slots = model.slots.assign(last=last.reindex(model.slots.index))
    peers = slots[slots["rank_id"] != rank].groupby("last")["tail_us"].median()
    excess = (slots["tail_us"] - slots["last"].map(peers)).clip(lower=0.0).fillna(0.0)
    return np.where(slots["rank_id"] == rank, excess.to_numpy(float), 0.0)


def scaled_transit(model: StepModel, factors: pd.Series) -> WhatIf:
    """The transit of each instance in ``factors`` (alignment id → factor) multiplied by its factor."""
    change = WhatIf.none(model)
    factor = pd.Series(model.instance_ids).map(factors).fillna(1.0).to_numpy(float)
    change.transit_us *= factor
    return change


def scaled_work(model: StepModel, factors: dict[int, float], tail_factors: dict[int, float] | None = None) -> WhatIf:
    """Every rank in ``factors`` with its local work before each collective multiplied by its factor,
    and its tails (the work after its last collective) by ``tail_factors`` (default: the same) — above 1
    a rank takes on work, below 1 it sheds it."""
    change = WhatIf.none(model)
    if model.empty:
        return change
    if len(model.rows):
        rows_factor = model.rows["rank_id"].map(factors).fillna(1.0).to_numpy(float)
        change.gap_cut_us = model.rows["gap_us"].to_numpy(float) * (1.0 - rows_factor)
    slot_factor = model.slots["rank_id"].map(factors if tail_factors is None else tail_factors)
    change.tail_cut_us = model.slots["tail_us"].to_numpy(float) * (1.0 - slot_factor.fillna(1.0).to_numpy(float))
    return change


def local_work_ms(model: StepModel, tails: bool = True) -> pd.Series:
    """Per rank, its mean local work per step (ms): the work before its collectives plus (``tails``) the
    work after its last one."""
    if model.empty:
        return pd.Series(dtype=float)
    gaps = model.rows.groupby("rank_id")["gap_us"].sum() if len(model.rows) else pd.Series(dtype=float)
    tail = model.slots.groupby("rank_id")["tail_us"].sum() * (1.0 if tails else 0.0)
    steps = model.slots.groupby("rank_id").size()
    return tail.add(gaps, fill_value=0.0) / steps / 1000.0


def combined(model: StepModel, changes: list[WhatIf]) -> WhatIf:
    """Several changes at once: per row and slot the largest cut, per instance the shortest transit."""
    change = WhatIf.none(model)
    for other in changes:
        change.gap_cut_us = np.maximum(change.gap_cut_us, other.gap_cut_us)
        change.tail_cut_us = np.maximum(change.tail_cut_us, other.tail_cut_us)
        change.transit_us = np.minimum(change.transit_us, other.transit_us)
    return change


def _slots(steps: pd.DataFrame) -> pd.DataFrame:
    if steps.empty or not set(STEP_COLUMNS) <= set(steps.columns):
        return pd.DataFrame(columns=[*STEP_COLUMNS, "step_key"])
    slots = steps[list(STEP_COLUMNS)].dropna(subset=["start_us", "end_us"])
    # ranks agree on the capture's step ids; ordinals are only a fallback (steps found by structure)
    key = slots["step_id"] if slots["step_id"].notna().all() else slots["step_ordinal"]
    return slots.assign(step_key=key.astype("int64")).sort_values(["rank_id", "start_us"]).reset_index(drop=True)


def _previous_slots(slots: pd.DataFrame) -> tuple[list[int], list[float]]:
    """Per slot, the index of its rank's previous slot (-1 for a rank's first) and the measured time
    from that slot's end to this one's start (never negative)."""
    index = np.arange(len(slots))
    same_rank = slots["rank_id"].to_numpy()[1:] == slots["rank_id"].to_numpy()[:-1]
    previous = np.where(np.concatenate([[False], same_rank]), index - 1, -1)
    ends = slots["end_us"].to_numpy(float)
    between = np.where(previous >= 0, slots["start_us"].to_numpy(float) - ends[np.clip(previous, 0, None)], 0.0)
    return previous.tolist(), np.clip(between, 0.0, None).tolist()


def _slot_of(frame: pd.DataFrame, slots: pd.DataFrame) -> np.ndarray:
    """Index into ``slots`` of the (rank, step) each row's start_us falls in; -1 outside every step."""
    result = np.full(len(frame), -1, dtype=np.int64)
    ranks = frame["rank_id"].to_numpy()
    starts = frame["start_us"].to_numpy(float)
    for rank, own in slots.groupby("rank_id"):  # a loop over ranks
        mask = ranks == rank
        at = np.searchsorted(own["start_us"].to_numpy(), starts[mask], side="right") - 1
        valid = (at >= 0) & (starts[mask] <= own["end_us"].to_numpy()[np.clip(at, 0, None)])
        result[np.flatnonzero(mask)[valid]] = own.index.to_numpy()[at[valid]]
    return result


def _empty_model(slots: pd.DataFrame) -> StepModel:
    rows = pd.DataFrame(columns=["instance", "slot", "rank_id", "alignment_id", "start_us", "end_us", "gap_us"])
    return StepModel(slots, rows, np.zeros(1, dtype=np.int64), np.zeros(0), np.array([], dtype=object))
