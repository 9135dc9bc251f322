"""What a cause costs: re-time each step with the cause removed and measure how much shorter it gets.

The model (docs/architecture.md, "Recoverable time"): each rank's step is local work — compute and
idle — between the collectives it joins; a collective ends when its last member arrives plus its
transit, and every member leaves it then. Replaying the measured step through the model gives a
baseline; replaying it with one cause removed (a rank's work at its peers' median, an idle window
closed, a transit shortened) gives the what-if, and the difference per step is the finding's
``recoverable_ms_per_step``. Because both runs go through the same model, its simplifications
(collectives overlapping compute are treated as blocking, unless they run on a communication stream
beside their rank's other collectives) mostly cancel.

The replay loops over collective instances (not events), each step independently: thousands per
step at most, each a few array reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.streams import BESIDE, with_streams

ALIGNMENT_COLUMNS = (
    "alignment_id",
    "rank_id",
    "start_us",
    "end_us",
    "corrected_start_us",
    "corrected_end_us",
)
STEP_COLUMNS = ("rank_id", "step_ordinal", "step_id", "start_us", "end_us")
# optional alignment columns the rows keep: which collective a row is, so a saving lands on its ledger lines
LABEL_COLUMNS = ("kind", "parallel_role")
MEASURED_TRANSIT = "transit_us"  # optional alignment column: the op's own transit (communication.json)
HEAD = "head_ms"  # optional step column: the step's start to its first kernel


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
    # per instance whose group has members the capture lacks: when they arrived, as µs after the earliest
    # start of its captured members' steps (they end its wait whatever the captured ranks do); NaN elsewhere
    pinned_us: np.ndarray | None = None

    @property
    def empty(self) -> bool:
        return self.slots.empty

    @cached_property
    def baseline_parts(self) -> "ReplayedParts":
        """The measured steps replayed unchanged, part by part (each finding's what-if is compared with it)."""
        return replay_parts(self)

    @cached_property
    def baseline_walls(self) -> pd.Series:
        """The measured steps' replayed walls (µs) by step key."""
        return self.walls_of(self.baseline_parts)

    def walls_of(self, parts: "ReplayedParts") -> pd.Series:
        """Each step's replayed wall (µs): the mean over its ranks of each rank's step wall."""
        return pd.Series(parts.slot_wall_us, index=self.slots.index).groupby(self.slots["step_key"]).mean()


@dataclass(frozen=True)
class ReplayedParts:
    """Where each replayed step's time goes. Per slot (rank, step) its wall is the sum of its blocking
    rows' local work, wait and transit, its tail, and the overhang of its communication stream past its
    compute at the step's end (floating ops still running): ``slot_wall_us`` = Σ rows + tail + stream.
    Per row (``StepModel.rows``): ``row_work_us`` the local work before it, ``row_wait_us`` the wait for
    its last member, ``row_transit_us`` its transit (all 0 on a floating row: it holds no compute back)."""

    slot_wall_us: np.ndarray
    slot_tail_us: np.ndarray
    slot_stream_us: np.ndarray
    row_work_us: np.ndarray
    row_wait_us: np.ndarray
    row_transit_us: np.ndarray


@dataclass
class WhatIf:
    """A change to the measured step: local work cut per row and per slot tail, transit per instance."""

    gap_cut_us: np.ndarray
    tail_cut_us: np.ndarray
    transit_us: np.ndarray
    windows: pd.DataFrame | None = None  # kernel windows close_windows cut, with their slot: booked by block

    @classmethod
    def none(cls, model: StepModel) -> "WhatIf":
        return cls(np.zeros(len(model.rows)), np.zeros(len(model.slots)), model.transit_us.copy())


def build_step_model(alignment: pd.DataFrame, steps: pd.DataFrame, incomplete: set | None = None) -> StepModel:
    """The replay model of the steps in ``steps`` (step_summary rows) from ``collective_alignment``.

    ``incomplete``: alignment ids of instances whose group has members the capture lacks. Such an
    instance ends when its last member arrives plus its transit, and its last member may be one the
    capture does not hold: its transit is the ops' own (communication.json's), and the rest of its hold
    after the captured members' last arrival is the missing members' arrival, pinned where it was
    measured — a captured rank arriving sooner waits longer, it does not end the collective sooner."""
    slots = _slots(steps)
    if slots.empty:
        return _empty_model(slots)
    if not set(ALIGNMENT_COLUMNS) <= set(alignment.columns):  # no collectives (one rank, no cross_rank)
        alignment = pd.DataFrame(columns=list(ALIGNMENT_COLUMNS))
    extra = [c for c in (BESIDE, *LABEL_COLUMNS, MEASURED_TRANSIT) if c in alignment.columns]
    rows = alignment[[*ALIGNMENT_COLUMNS, *extra]].dropna(subset=["start_us", "end_us", "corrected_start_us"])
    rows = rows[rows["rank_id"].isin(slots["rank_id"])]
    offsets = (rows["start_us"] - rows["corrected_start_us"]).groupby(rows["rank_id"]).median()
    slots["corrected_start_us"] = slots["start_us"] - slots["rank_id"].map(offsets).fillna(0.0)
    rows = rows.assign(slot=slot_of(rows, slots))
    rows = rows[rows["slot"] >= 0]
    if rows.empty:
        slots["tail_us"] = slots["end_us"] - slots["start_us"]
        return _empty_model(slots)
    rows = with_streams(rows.sort_values(["slot", "start_us"], kind="stable"), slots)
    last_end = rows.groupby("slot")["end_us"].max().reindex(slots.index)
    slots["tail_us"] = np.clip(slots["end_us"] - last_end.fillna(slots["start_us"]), 0.0, None)
    per_instance = rows.groupby("alignment_id").agg(
        first_end=("corrected_end_us", "min"),
        last_arrival=("corrected_start_us", "max"),
        mean_end=("corrected_end_us", "mean"),
        floating=("floating", "first"),
    )
    # replay order: a blocking op once its first member leaves it; an op on the communication stream
    # once its last member issues it (every blocking op before it on each member has then ended)
    per_instance["key"] = per_instance["first_end"].where(~per_instance["floating"], per_instance["last_arrival"])
    per_instance = per_instance.sort_values("key", kind="stable")
    order = pd.Series(np.arange(len(per_instance)), index=per_instance.index)
    rows["instance"] = order.reindex(rows["alignment_id"]).to_numpy()
    rows = rows.sort_values(["instance", "rank_id"], kind="stable")
    # the previous blocking row, as an index into the rows in their final order
    position = pd.Series(np.arange(len(rows)), index=rows.index)
    previous = rows["previous_row"].to_numpy()
    rows["previous_row"] = np.where(previous >= 0, position.reindex(previous).fillna(-1).to_numpy(), -1).astype(int)
    rows = rows.reset_index(drop=True)
    counts = np.bincount(rows["instance"].to_numpy(), minlength=len(per_instance))
    transit = np.clip((per_instance["mean_end"] - per_instance["last_arrival"]).to_numpy(), 0.0, None)
    pinned = _pinned(rows, slots, per_instance, transit, incomplete or set())
    transit = np.where(np.isnan(pinned), transit, np.minimum(transit, _measured_transit(rows, per_instance)))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return StepModel(slots, rows, bounds, transit, per_instance.index.to_numpy(), pinned)


def _measured_transit(rows: pd.DataFrame, per_instance: pd.DataFrame) -> np.ndarray:
    """Per instance (``per_instance`` order), its members' median own transit (communication.json's), 0
    where the alignment does not give it."""
    if MEASURED_TRANSIT not in rows.columns:
        return np.zeros(len(per_instance))
    own = rows.groupby("alignment_id")[MEASURED_TRANSIT].median()
    return own.reindex(per_instance.index).fillna(0.0).clip(lower=0.0).to_numpy(float)


def _pinned(
    rows: pd.DataFrame, slots: pd.DataFrame, per_instance: pd.DataFrame, transit: np.ndarray, incomplete: set
) -> np.ndarray:
    """Per instance of ``incomplete``, the missing members' arrival (its end less the ops' own transit) as
    µs after the earliest corrected start of its captured members' steps; NaN for the others."""
    pinned = np.full(len(per_instance), np.nan)
    chosen = per_instance.index.isin(list(incomplete))
    if not chosen.any():
        return pinned
    own = np.minimum(transit, _measured_transit(rows, per_instance))
    first_start = slots["corrected_start_us"].reindex(rows["slot"]).groupby(rows["alignment_id"].to_numpy()).min()
    arrival = per_instance["mean_end"].to_numpy(float) - own
    pinned[chosen] = (arrival - first_start.reindex(per_instance.index).to_numpy(float))[chosen]
    return pinned


def step_walls(model: StepModel, what_if: WhatIf | None = None) -> pd.Series:
    """Replayed wall (µs) of each step: the mean over its ranks of each rank's step wall (as step_summary
    measures it; pipeline stages start their steps at different times, so a span across ranks would
    count the stagger). A rank's next step starts when its previous one ends plus the measured time
    between them: a change that delays or hastens one step moves the rank's later steps with it (a
    pipeline stage's step begins with its wait for the stage before, so fixed starts would misprice it)."""
    return model.walls_of(replay_parts(model, what_if))


def replay_parts(model: StepModel, what_if: WhatIf | None = None) -> ReplayedParts:
    """The replay of the steps (with ``what_if``'s change), each slot's wall and the parts it is made of."""
    replay = _Replay(model, what_if or WhatIf.none(model))
    for instance in range(len(replay.transit)):  # a loop over collective instances, in replay order
        replay.run(instance)
    for s in range(len(replay.clock)):
        replay.start(s)
    clock, stream, tail = np.asarray(replay.clock), np.asarray(replay.stream), np.asarray(replay.tail)
    return ReplayedParts(
        slot_wall_us=np.maximum(clock, stream) + tail - np.asarray(replay.starts),
        slot_tail_us=tail,
        slot_stream_us=np.clip(stream - clock, 0.0, None),
        row_work_us=np.asarray(replay.row_work),
        row_wait_us=np.asarray(replay.row_wait),
        row_transit_us=np.asarray(replay.row_transit),
    )


class _Replay:
    """The replay's state: per slot its compute clock and its communication stream (where its floating
    ops run), per row when it ended; plain lists, read a few times per instance."""

    def __init__(self, model: StepModel, change: WhatIf) -> None:
        rows = model.rows
        self.clock = model.slots["corrected_start_us"].to_numpy(float).tolist()
        self.starts, self.stream = list(self.clock), list(self.clock)
        self.tail = (model.slots["tail_us"].to_numpy(float) - change.tail_cut_us).clip(0.0).tolist()
        self.previous, self.between = _previous_slots(model.slots)
        self.started = [p < 0 for p in self.previous]
        self.transit, self.bounds = change.transit_us.tolist(), model.bounds.tolist()
        pinned = model.pinned_us if model.pinned_us is not None else np.full(len(self.transit), np.nan)
        self.pinned = [None if np.isnan(p) else float(p) for p in pinned]
        columns = {"slot": int, "floating": bool, "queued": bool, "previous_row": int}
        lists = {name: rows[name].to_numpy(kind).tolist() if len(rows) else [] for name, kind in columns.items()}
        self.slot, self.floating, self.queued, self.previous_row = lists.values()
        # a queued op waits for its issue where it is estimated (``issue_us``), else for its stream only
        issue = rows["issue_us"].to_numpy(float) if len(rows) else np.zeros(0)
        unknown = np.isnan(issue) & np.asarray(self.queued, dtype=bool)
        base = np.where(np.asarray(self.queued, dtype=bool) & ~unknown, issue, rows["gap_us"].to_numpy(float))
        self.gap = (base - change.gap_cut_us).clip(0.0).tolist() if len(rows) else []
        self.issue_unknown = unknown.tolist()
        self.row_end = [0.0] * len(self.slot)
        # what each blocking row holds of its slot's wall: the work before it, its wait, its transit
        self.row_work, self.row_wait, self.row_transit = ([0.0] * len(self.slot) for _ in range(3))

    def start(self, s: int) -> None:
        """A slot's clocks from its rank's previous slot, on first use."""
        chain = []
        while not self.started[s]:
            chain.append(s)
            s = self.previous[s]
        for current in reversed(chain):
            before = self.previous[current]
            at = max(self.clock[before], self.stream[before]) + self.tail[before] + self.between[current]
            self.clock[current] = self.starts[current] = self.stream[current] = at
            self.started[current] = True

    def ready(self, k: int) -> float:
        """When a floating op can start on member row k: issued, and its stream free."""
        s = self.slot[k]
        if self.queued[k] and self.issue_unknown[k]:
            return self.stream[s]
        previous = self.previous_row[k]
        issued = (self.row_end[previous] if previous >= 0 else self.starts[s]) + self.gap[k]
        return max(self.stream[s], issued)

    def run(self, instance: int) -> None:
        """One instance: it ends at its last member's start plus its transit; a blocking one moves its
        members' compute clocks there, a floating one their streams."""
        members = range(self.bounds[instance], self.bounds[instance + 1])
        for k in members:
            self.start(self.slot[k])
        on_stream = self.floating[self.bounds[instance]]
        transit = self.transit[instance]
        pinned = self.pinned[instance]  # the members the capture lacks arrive when they were measured to
        missing = -np.inf if pinned is None else min(self.starts[self.slot[k]] for k in members) + pinned
        if on_stream:
            end = max(max(self.ready(k) for k in members), missing) + transit
        else:
            end = max(max(self.clock[self.slot[k]] + self.gap[k] for k in members), missing) + transit
            for k in members:
                self.row_work[k], self.row_transit[k] = self.gap[k], transit
                self.row_wait[k] = end - transit - self.clock[self.slot[k]] - self.gap[k]
        moved = self.stream if on_stream else self.clock
        for k in members:
            self.row_end[k] = end
            moved[self.slot[k]] = end


def recoverable_ms(model: StepModel, what_if: WhatIf) -> float:
    """Mean over the modelled steps of (baseline − what-if) replayed wall, ms; never negative."""
    if model.empty:
        return 0.0
    saved = model.baseline_walls - step_walls(model, what_if)
    return max(float(saved.mean()) / 1000.0, 0.0)


def close_windows(model: StepModel, windows: pd.DataFrame, kernels: bool = False) -> WhatIf:
    """Remove idle or exposed windows (rank_id, start_us on the rank's own clock, duration_us): each
    shortens the local work it falls in — before the rank's next blocking collective, and the issue of
    every op on the communication stream between (a gradient bucket is issued that much sooner) — or its
    step's tail (after its last collective ended). ``kernels``: the windows are kernels' own time (a fused
    chain, a faster call), kept on the change so the ledger books each on the block it ran in."""
    change = WhatIf.none(model)
    if model.empty or windows.empty:
        return change
    slot = slot_of(windows, model.slots)  # kept with kernel windows: savings splits each slot's work by them
    change.windows = windows[["rank_id", "start_us", "duration_us"]].assign(slot=slot) if kernels else None
    cut = windows["duration_us"].to_numpy(float)
    hit = np.zeros(len(windows), dtype=bool)
    if len(model.rows):
        hit = _cut_rows(model, change, slot, windows["start_us"].to_numpy(float), cut)
    last_end = model.rows.groupby("slot")["end_us"].max() if len(model.rows) else pd.Series(dtype=float)
    ends = last_end.reindex(slot).to_numpy(float)
    in_tail = (slot >= 0) & ~hit & ~(windows["start_us"].to_numpy(float) < ends)  # after its last op ended
    np.add.at(change.tail_cut_us, slot[in_tail], cut[in_tail])
    return change


def _cut_rows(model: StepModel, change: WhatIf, slot: np.ndarray, start: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """Each window's cut on the rows from the first one after it up to the blocking row that ends its
    stretch of local work (a difference array over the rows in slot, start order, summed); which
    windows fell before some row of their slot."""
    ordered = model.rows.sort_values(["slot", "start_us"])
    first = _first_row_at_or_after(model, ordered, slot, start)
    row_slot = ordered["slot"].to_numpy(np.int64)
    position = np.arange(len(ordered))
    stop = pd.Series(np.where(~ordered["floating"].to_numpy(bool), position, np.nan)).groupby(row_slot).bfill()
    slot_last = pd.Series(position).groupby(row_slot).transform("max").to_numpy()
    stop = np.where(np.isnan(stop.to_numpy()), slot_last, stop.to_numpy()).astype(np.int64)
    hit = first >= 0
    diff = np.zeros(len(ordered) + 1)
    np.add.at(diff, first[hit], cut[hit])
    np.add.at(diff, stop[first[hit]] + 1, -cut[hit])
    change.gap_cut_us[ordered.index.to_numpy()] = np.cumsum(diff)[:-1]
    return hit


def _first_row_at_or_after(model: StepModel, ordered: pd.DataFrame, slot: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per event (its slot, start_us), the position in ``ordered`` (rows by slot, start) of the first row
    of its slot starting at or after it; -1 for none (or outside every step)."""
    found = np.full(len(slot), -1, dtype=np.int64)
    inside = slot >= 0
    if not len(ordered) or not inside.any():
        return found
    slot_start = model.slots["start_us"].to_numpy(float)
    width = float((model.slots["end_us"] - model.slots["start_us"]).max()) + 1.0
    row_slot = ordered["slot"].to_numpy(np.int64)
    row_keys = row_slot * width + (ordered["start_us"].to_numpy(float) - slot_start[row_slot])
    own = slot[inside]
    at = np.searchsorted(row_keys, own * width + (start[inside] - slot_start[own]))
    hit = at < len(row_keys)
    hit[hit] = row_slot[at[hit]] == own[hit]
    found[np.flatnonzero(inside)[hit]] = at[hit]
    return found


def work_rows(model: StepModel, events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Where each event (rank_id, start_us on the rank's own clock) is local work: its (rank, step) slot
    and the row of the first blocking collective of that slot starting at or after it (whose ``gap_us``
    holds it); slot -1 outside every step, row -1 in the slot's tail (after its last collective). Work
    before an op on the communication stream does not delay the rank, so floating rows hold none."""
    slot = slot_of(events, model.slots)
    row = np.full(len(events), -1, dtype=np.int64)
    if model.empty or model.rows.empty:
        return slot, row
    blocking = model.rows[~model.rows["floating"].astype(bool)].sort_values(["slot", "start_us"])
    at = _first_row_at_or_after(model, blocking, slot, events["start_us"].to_numpy(float))
    row[at >= 0] = blocking.index.to_numpy()[at[at >= 0]]
    return slot, row


def at_peer_median(model: StepModel, rank: int, instances: np.ndarray | None = None) -> WhatIf:
    """``rank``'s local work before each collective at the median of the other members' (only where it
    is longer; ``instances``: alignment ids to change, default all the rank joins with peers, and then its
    tails too: a slow rank is slow after its last collective as well, e.g. in its optimizer)."""
    change = WhatIf.none(model)
    rows = model.rows
    if rows.empty:
        return change
    others = rows[rows["rank_id"] != rank]
    # a queued op's gap is not when its rank issued it (it waited for its stream): not a peer's measure
    peers = others[~others["queued"].astype(bool)].groupby("instance")["gap_us"].median()
    mine = rows[(rows["rank_id"] == rank) & rows["instance"].isin(others["instance"]) & ~rows["queued"].astype(bool)]
    if instances is not None:
        mine = mine[mine["alignment_id"].isin(instances)]
    else:
        change.tail_cut_us = _tail_excess(model, rank)
    target = peers.reindex(mine["instance"]).to_numpy()
    gap = mine["gap_us"].to_numpy(float)
    known = ~np.isnan(target)
    if (~known).any() and (known & (gap > 0)).any():
        # where every peer's op was queued, the rank's own issue scaled as its known ones compare
        target = np.where(known, target, gap * np.median(target[known & (gap > 0)] / gap[known & (gap > 0)]))
    excess = np.clip(gap - np.nan_to_num(target, nan=np.inf), 0.0, None)
    change.gap_cut_us[mine.index.to_numpy()] = excess
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


def combined(model: StepModel, changes: list[WhatIf]) -> WhatIf:
    """Several changes at once: per row and slot the largest cut (two causes of the same work do not
    remove it twice) plus the largest addition (work a change moves onto a rank, as balancing experts
    does), per instance the shortest transit."""
    change = WhatIf.none(model)
    added_gap, added_tail = np.zeros_like(change.gap_cut_us), np.zeros_like(change.tail_cut_us)
    for other in changes:
        change.gap_cut_us = np.maximum(change.gap_cut_us, other.gap_cut_us)
        change.tail_cut_us = np.maximum(change.tail_cut_us, other.tail_cut_us)
        added_gap, added_tail = np.minimum(added_gap, other.gap_cut_us), np.minimum(added_tail, other.tail_cut_us)
        change.transit_us = np.minimum(change.transit_us, other.transit_us)
    change.gap_cut_us += added_gap
    change.tail_cut_us += added_tail
    return change


def summed(model: StepModel, changes: list[WhatIf]) -> WhatIf:
    """Independent changes at once (different causes of different work): their cuts and additions add
    up, and each instance's transit takes every change's factor (a slow link sped up and the buckets it
    carries made smaller both count; a move that adds parameters lengthens it)."""
    change = WhatIf.none(model)
    base = np.where(model.transit_us > 0, model.transit_us, 1.0)
    for other in changes:
        change.gap_cut_us = change.gap_cut_us + other.gap_cut_us
        change.tail_cut_us = change.tail_cut_us + other.tail_cut_us
        change.transit_us = np.where(model.transit_us > 0, change.transit_us * other.transit_us / base, 0.0)
    return change


def _slots(steps: pd.DataFrame) -> pd.DataFrame:
    if steps.empty or not set(STEP_COLUMNS) <= set(steps.columns):
        return pd.DataFrame(columns=[*STEP_COLUMNS, "head_us", "step_key"])
    slots = steps[list(STEP_COLUMNS)].dropna(subset=["start_us", "end_us"])
    # the time before the step's first kernel (a host stall at its top): not the pace of its compute
    head = steps.loc[slots.index, HEAD] * 1000.0 if HEAD in steps.columns else pd.Series(0.0, index=slots.index)
    slots = slots.assign(head_us=head.fillna(0.0).clip(lower=0.0))
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


def slot_of(frame: pd.DataFrame, slots: pd.DataFrame) -> np.ndarray:
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
    columns = [
        *("instance", "slot", "rank_id", "alignment_id", "start_us", "end_us", "gap_us", "issue_us"),
        *("floating", "queued", *LABEL_COLUMNS),
    ]
    rows = pd.DataFrame(columns=[*columns, "previous_row"])
    return StepModel(slots, rows, np.zeros(1, dtype=np.int64), np.zeros(0), np.array([], dtype=object))
