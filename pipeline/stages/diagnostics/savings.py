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

A change that removes windows of the timeline (kernels cut, retiming.close_windows) says which ledger line
each window ran on (``window_lines``): a slot's work saving is split over those lines as the windows' time
is, and the ledger credits each part to its own line first (a loss chain's kernels outside the layers on
"compute outside blocks", not spread over every compute line of the step).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.retiming import StepModel, WhatIf, replay_parts

# work: local compute and idle (before a collective, or the tail); wait: a member's wait at a blocking
# collective for its last member; transit: a blocking collective's transit; stream: the communication
# stream still running past the compute at the step's end
PARTS = ("work", "wait", "transit", "stream")
# line: for work, the ledger line the cut windows ran on ("" where the change names none)
SAVING_COLUMNS = ["rank_id", "step_ordinal", "part", "role", "kind", "line", "ms"]
UNKNOWN_ROLE = "unknown"  # the parallel role of a collective whose group the capture does not name


def replay_savings(model: StepModel, change: WhatIf, window_lines: pd.Series | None = None) -> pd.DataFrame:
    """Per slot and part of its step, the ms ``change`` saves there (``SAVING_COLUMNS``; role and kind of
    the collective for wait, transit and stream, empty for work), scaled so each slot's savings add up to
    its replayed wall's net shortening (none where the step got no shorter). ``window_lines``: per window
    of ``change.windows``, the ledger line it ran on; a slot's work is split over them by the windows' µs."""
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
    parts = _work_by_line(parts[parts["ms"] > 1e-9], change, window_lines)
    at = parts["slot"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "rank_id": slots["rank_id"].to_numpy()[at].astype(np.int64),
            "step_ordinal": slots["step_ordinal"].to_numpy()[at].astype(np.int64),
            "part": parts["part"].to_numpy(),
            "role": parts["role"].to_numpy(),
            "kind": parts["kind"].to_numpy(),
            "line": parts["line"].to_numpy(),
            "ms": parts["ms"].to_numpy(float),
        }
    )


def _work_by_line(parts: pd.DataFrame, change: WhatIf, window_lines: pd.Series | None) -> pd.DataFrame:
    """``parts`` (slot, part, role, kind, ms) with a ``line``: each slot's work split over the lines its
    windows ran on, in proportion to their µs there; "" for every other part and for work no window
    names a line of."""
    parts = parts.assign(line="")
    if window_lines is None or change.windows is None or not len(change.windows):
        return parts
    windows = change.windows.assign(line=window_lines.to_numpy())
    windows = windows[(windows["slot"] >= 0) & windows["line"].astype(bool) & (windows["duration_us"] > 0)]
    per_line = windows.groupby(["slot", "line"], as_index=False)["duration_us"].sum()
    per_line["share"] = per_line["duration_us"] / per_line.groupby("slot")["duration_us"].transform("sum")
    work = parts["part"].eq("work")
    split = parts[work].drop(columns="line").merge(per_line[["slot", "line", "share"]], on="slot", how="left")
    split["ms"] = split["ms"] * split["share"].fillna(1.0)
    split = split.fillna({"line": ""}).drop(columns="share")
    return pd.concat([parts[~work], split], ignore_index=True)


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
