"""Where a replayed change saves its time: per rank, step and part of the step.

The replay prices a finding as how much shorter the mean step gets without its cause (retiming.py); the
step ledger credits the finding with the same shortening, rank by rank, on the lines of each rank's step
that got shorter. Each replayed slot (rank, step) is its blocking collectives' local work, wait and
transit, its tail and its communication stream's overhang (``retiming.ReplayedParts``); the baseline
minus the what-if, part by part, says where the change took time away and where it added some. A change
often does both: a rank that computes less waits longer for its peers, and moving layers between
pipeline stages adds compute to one stage while it takes wait from it. So the parts that shrank are
scaled down to the slot's net saving: a rank's savings add up to what its step gains, and no part is
credited more than it lost.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.retiming import StepModel, WhatIf, replay_parts

# work: local compute and idle (before a collective, or the tail); wait: a member's wait at a blocking
# collective for its last member; transit: a blocking collective's transit; stream: the communication
# stream still running past the compute at the step's end
PARTS = ("work", "wait", "transit", "stream")
SAVING_COLUMNS = ["rank_id", "step_ordinal", "part", "role", "kind", "ms"]
UNKNOWN_ROLE = "unknown"  # the parallel role of a collective whose group the capture does not name


def replay_savings(model: StepModel, change: WhatIf) -> pd.DataFrame:
    """Per slot and part of its step, the ms ``change`` saves there (``SAVING_COLUMNS``; role and kind of
    the collective for wait, transit and stream, empty for work), scaled so each slot's savings add up to
    its replayed wall's net shortening (none where the step got no shorter)."""
    if model.empty:
        return pd.DataFrame(columns=SAVING_COLUMNS)
    base, new = model.baseline_parts, replay_parts(model, change)
    slots, rows = model.slots, model.rows
    slot_count = len(slots)
    row_slot = rows["slot"].to_numpy(np.int64) if len(rows) else np.zeros(0, np.int64)
    work = base.slot_tail_us - new.slot_tail_us
    work = work + np.bincount(row_slot, weights=base.row_work_us - new.row_work_us, minlength=slot_count)
    role, kind = _labels(rows)
    stream_role, stream_kind = _last_floating_labels(rows, role, kind, slot_count)
    stream = base.slot_stream_us - new.slot_stream_us
    # a rank whose collectives all ran on its communication stream holds its local work in the stream's
    # overhang (its compute clock never passes a blocking op): what its own work cut there moved is work
    issued_sooner = _floating_cut(rows, change, slot_count)
    moved = np.clip(np.minimum(stream, issued_sooner), 0.0, None)
    work, stream = work + moved, stream - moved
    slots_at = np.arange(slot_count)
    parts = pd.concat(
        [
            _part(slots_at, "work", "", "", work),
            _part(slots_at, "stream", stream_role, stream_kind, stream),
            _part(row_slot, "wait", role, kind, base.row_wait_us - new.row_wait_us),
            _part(row_slot, "transit", role, kind, base.row_transit_us - new.row_transit_us),
        ],
        ignore_index=True,
    )
    parts = parts.groupby(["slot", "part", "role", "kind"], as_index=False, sort=False)["us"].sum()
    net = base.slot_wall_us - new.slot_wall_us
    shrank = parts["us"].clip(lower=0.0)
    removed = np.bincount(parts["slot"].to_numpy(np.int64), weights=shrank.to_numpy(), minlength=slot_count)
    scale = np.where(removed > 0, np.clip(net, 0.0, None) / np.where(removed > 0, removed, 1.0), 0.0)
    parts["ms"] = shrank.to_numpy() * scale[parts["slot"].to_numpy(np.int64)] / 1000.0
    parts = parts[parts["ms"] > 1e-9]
    at = parts["slot"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "rank_id": slots["rank_id"].to_numpy()[at].astype(np.int64),
            "step_ordinal": slots["step_ordinal"].to_numpy()[at].astype(np.int64),
            "part": parts["part"].to_numpy(),
            "role": parts["role"].to_numpy(),
            "kind": parts["kind"].to_numpy(),
            "ms": parts["ms"].to_numpy(float),
        }
    )


def _part(slot: np.ndarray, part: str, role, kind, us: np.ndarray) -> pd.DataFrame:
    """One part's change per slot (or per row, by its slot), with its collective's role and kind."""
    return pd.DataFrame({"slot": slot, "part": part, "role": role, "kind": kind, "us": us})


def _floating_cut(rows: pd.DataFrame, change: WhatIf, slot_count: int) -> np.ndarray:
    """Per slot, the most local work the change cut before one of its floating ops (their issue)."""
    cut = np.zeros(slot_count)
    if not len(rows):
        return cut
    floating = rows["floating"].to_numpy(bool)
    own = np.minimum(change.gap_cut_us, rows["gap_us"].to_numpy(float))[floating]
    np.maximum.at(cut, rows["slot"].to_numpy(np.int64)[floating], np.clip(own, 0.0, None))
    return cut


def _labels(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each row's collective as the ledger names it: its parallel role (``unknown`` for none) and kind."""
    count = len(rows)
    role = rows["parallel_role"] if "parallel_role" in rows.columns else pd.Series([None] * count, dtype=object)
    kind = rows["kind"] if "kind" in rows.columns else pd.Series([None] * count, dtype=object)
    return (
        role.fillna(UNKNOWN_ROLE).astype(str).to_numpy(object),
        kind.fillna("").astype(str).to_numpy(object),
    )


def _last_floating_labels(
    rows: pd.DataFrame, role: np.ndarray, kind: np.ndarray, slot_count: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per slot, the role and kind of its last-ending floating collective (what runs past the compute at
    the step's end); empty for a slot without one."""
    slot_role = np.full(slot_count, "", dtype=object)
    slot_kind = np.full(slot_count, "", dtype=object)
    if not len(rows):
        return slot_role, slot_kind
    floating = np.flatnonzero(rows["floating"].to_numpy(bool))
    if not len(floating):
        return slot_role, slot_kind
    order = floating[np.lexsort((rows["end_us"].to_numpy(float)[floating], rows["slot"].to_numpy()[floating]))]
    last = pd.Series(order, index=rows["slot"].to_numpy()[order]).groupby(level=0).last()
    slot_role[last.index.to_numpy(np.int64)] = role[last.to_numpy()]
    slot_kind[last.index.to_numpy(np.int64)] = kind[last.to_numpy()]
    return slot_role, slot_kind
