"""Tasks that last far longer than the capture around them: a corrupt duration, or a task hung past the
capture. One such row (a Duration of 5e9 µs in a capture of seconds) would make its step hours long and
"100 % compute"; so a few are quarantined — left out of the events, each named in a warning — and more
than a few refuse the rank, whose export is then not to be trusted. Likewise a few rows that start far
from the rest (a corrupt timestamp) do not say when the rank started: ``body_start_ns`` does (segment
leaves such rows out of every step and names them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from npuprof import knowledge
from npuprof.pipeline.errors import BadInput


def long_task_limit_ns(start_ns: np.ndarray, rules: dict) -> float:
    """The longest a task of this rank may last: ``long_task_spans`` × the span its tasks start over
    (the 0.1 % at either end left out, so the rows in question do not stretch it), and never less
    than ``min_gap_s`` (a short capture's tasks may run into seconds)."""
    low, high = np.quantile(start_ns, [0.001, 0.999])
    return max(rules["min_gap_s"] * 1e9, rules["long_task_spans"] * float(high - low))


def body_span_ns(start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[float | None, float | None]:
    """When the rank's work starts and ends: its largest stretch of rows (by start) that no gap longer than
    ``min_gap_s`` splits. A row 83 minutes before the rest (a corrupt timestamp, which segment leaves out
    of every step) would otherwise date the rank — its root read as ranks of different captures, its
    capture 83 minutes long."""
    if len(start_ns) == 0:
        return None, None
    rules = knowledge.load("segmentation_rules")["quarantine"]
    order = np.argsort(start_ns, kind="stable")
    times = np.asarray(start_ns, dtype=np.float64)[order]
    stretch = np.concatenate(([0], np.cumsum(np.diff(times) > rules["min_gap_s"] * 1e9)))
    body = stretch == np.argmax(np.bincount(stretch))
    return float(times[body][0]), float(np.asarray(end_ns, dtype=np.float64)[order][body].max())


def quarantine_long_tasks(table: pa.Table, path: Path, kind: str) -> tuple[pa.Table, list[dict], list[str]]:
    """``table`` without the rows that last longer than ``long_task_limit_ns``, those rows (their line or
    db row and duration) and a note; a BadInput naming the first when they are more than
    ``max_stray_share`` of the rows (and more than one)."""
    if table.num_rows < 2:
        return table, [], []
    rules = knowledge.load("segmentation_rules")["quarantine"]
    start = table.column("start_ns").to_numpy(zero_copy_only=False)
    duration = table.column("duration_ns").to_numpy(zero_copy_only=False)
    limit = long_task_limit_ns(start, rules)
    long = duration > limit
    if not long.any():
        return table, [], []
    rows = table.column("row_idx").to_numpy(zero_copy_only=False)[long]
    where = "row" if kind == "profiler_db" else "line"
    places = rows + (0 if kind == "profiler_db" else 2)  # a CSV's data row i sits on line i + 2
    seconds = duration[long] / 1e9
    if long.sum() > max(1.0, rules["max_stray_share"] * table.num_rows):
        raise BadInput(
            path,
            f"{int(long.sum())} tasks last longer than {limit / 1e9:.0f} s, far beyond the rest of the capture "
            f"(the first {seconds[0]:.0f} s): too many to leave out of a trustworthy capture",
            **({"row": int(places[0])} if where == "row" else {"line": int(places[0])}),
        )
    quarantined = [{where: int(p), "duration_s": float(s), "limit_s": limit / 1e9} for p, s in zip(places, seconds)]
    shown = ", ".join(f"{where} {int(p)} ({s:,.0f} s)" for p, s in zip(places[:5], seconds[:5]))
    note = (
        f"{path.name}: {len(quarantined)} task{'s' if len(quarantined) > 1 else ''} lasting longer than "
        f"{limit / 1e9:,.0f} s, far beyond the rest of the capture ({shown}): quarantined, not events "
        "(a corrupt duration, or a task hung past the capture)"
    )
    return table.filter(pc.invert(pa.array(long))), quarantined, [note]
