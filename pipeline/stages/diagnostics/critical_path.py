"""The critical path of each step across ranks: the chain of segments that decides when the step ends.

Walked back from the rank whose step ends last, on the common clock (cross_rank's corrected times),
through the step model of the replay (``retiming.StepModel``): that rank's tail after its last
collective; the collective, which ended when its last member arrived plus its transit; the last
member's own work since its previous collective (compute, idle, launches: all it did on its own);
that collective's last member in turn; back to a step's start. A rank that arrives last at a
collective makes every other member wait, so the ranks on the path are the ones whose work sets the
step's pace; the others wait for them.

The walk visits each collective of a step at most once: a loop over collective instances, not events.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.retiming import StepModel

COLUMNS = [
    "step_key",  # the step's id (or ordinal, for steps found by structure)
    "position",  # order along the path, from the step's start
    "rank_id",
    "segment",  # work | transit | tail
    "start_us",  # on the common (corrected) clock
    "end_us",
    "ms",
    "alignment_id",  # the collective the work leads into, or whose transit it is (null for a tail)
]


def critical_path(model: StepModel) -> pd.DataFrame:
    """One row per segment of each step's critical path (``COLUMNS``), in order along the path."""
    if model.empty:
        return pd.DataFrame(columns=COLUMNS)
    slots = model.slots
    corrected_end = (slots["corrected_start_us"] + (slots["end_us"] - slots["start_us"])).to_numpy(float)
    rows = model.rows
    offset = (slots["start_us"] - slots["corrected_start_us"]).to_numpy(float)
    row_slot = rows["slot"].to_numpy(int) if len(rows) else np.array([], int)
    arrive = rows["start_us"].to_numpy(float) - offset[row_slot] if len(rows) else np.array([])
    leave = rows["end_us"].to_numpy(float) - offset[row_slot] if len(rows) else np.array([])
    # the path runs through the blocking collectives: an op on a communication stream decides nothing
    # until its rank waits for it, and the tail after the last blocking op holds that wait
    blocking = ~rows["floating"].to_numpy(bool) if len(rows) else np.array([], bool)
    previous, last_of_slot = _row_order(row_slot, np.where(blocking, arrive, np.nan), len(slots))
    instance = rows["instance"].to_numpy(int) if len(rows) else np.array([], int)
    order = _Order(slots["corrected_start_us"].to_numpy(float), corrected_end, row_slot, arrive, leave)
    segments: list[tuple] = []
    for key, members in slots.groupby("step_key").groups.items():  # a loop over steps
        finisher = int(members[np.argmax(corrected_end[members])])
        path = _walk(finisher, model.bounds, order, previous, last_of_slot, instance)
        segments += [(key, position, *segment) for position, segment in enumerate(reversed(path))]
    names = ["step_key", "position", "slot", "segment", "start_us", "end_us", "instance"]
    frame = pd.DataFrame(segments, columns=names)
    frame["rank_id"] = slots["rank_id"].to_numpy()[frame["slot"].to_numpy(int)]
    frame["ms"] = (frame["end_us"] - frame["start_us"]).clip(lower=0.0) / 1000.0
    ids = np.append(model.instance_ids, None)
    frame["alignment_id"] = ids[frame["instance"].fillna(-1).to_numpy(int)]
    return frame[COLUMNS]


def _row_order(row_slot: np.ndarray, arrive: np.ndarray, slot_count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the row of the same slot just before it (-1: the slot's first), and per slot its last row."""
    order = np.lexsort((arrive, row_slot))
    order = order[~np.isnan(arrive[order])]  # rows without an arrival take no part in the order
    previous = np.full(len(row_slot), -1)
    same = row_slot[order][1:] == row_slot[order][:-1]
    previous[order[1:][same]] = order[:-1][same]
    last_of_slot = np.full(slot_count, -1)
    last_of_slot[row_slot[order]] = order  # the last write per slot is its latest row
    return previous, last_of_slot


class _Order(NamedTuple):
    """The arrays a walk reads, as NumPy (a walk visits few rows of each: pandas' cost per access would be
    most of it): per slot its corrected start and end, per row its slot, arrival and leaving time."""

    slot_start: np.ndarray
    slot_end: np.ndarray
    row_slot: np.ndarray
    arrive: np.ndarray
    leave: np.ndarray


def _walk(finisher, bounds, order: _Order, previous, last_of_slot, instance) -> list[tuple]:
    """The path of one step, from its end back to its start: (slot, segment, start, end, instance)."""
    arrive, leave = order.arrive, order.leave
    row = int(last_of_slot[finisher])
    if row < 0:  # no collective in the step: the finishing rank's whole step is the path
        return [(finisher, "work", order.slot_start[finisher], order.slot_end[finisher], None)]
    path = [(finisher, "tail", leave[row], order.slot_end[finisher], None)]
    seen = set()
    while row >= 0 and instance[row] not in seen:
        seen.add(instance[row])
        lo, hi = bounds[instance[row]], bounds[instance[row] + 1]
        last = lo + int(np.argmax(arrive[lo:hi]))  # the member that arrived last
        slot = int(order.row_slot[last])
        path.append((slot, "transit", arrive[last], leave[row], instance[row]))
        before = int(previous[last])
        start = leave[before] if before >= 0 else order.slot_start[slot]
        path.append((slot, "work", start, arrive[last], instance[row]))
        row = before
    return path
