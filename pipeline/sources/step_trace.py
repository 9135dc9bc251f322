"""step_trace_time.csv: the profiler's own per-step split of one rank (µs), read for ranks whose
kernels the capture does not hold, so every rank still has a step breakdown (labelled as its source).

Columns as the vendor publishes them: ``Stage`` is the step's wall, made of ``Computing`` (which
includes ``Overlapped``, compute beside communication), ``Communication(Not Overlapped)`` and
``Free`` (the device idle). ``Preparing`` (newer exports) is the time from the profiler's step start
to the step's first device task: where each step starts (segment).

A capture without profiler steps (a serving one: vLLM-Ascend's /start_profile … /stop_profile runs no
schedule, so no ProfilerStep) exports one row per device with an empty ``Step``: the whole capture's
split, no step's. It is read as no step rows — there is no step to split — not as an unreadable file.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.input_files import read_input_bytes

COLUMNS = {
    "Step": "step_id",
    "Computing": "computing_us",
    "Communication(Not Overlapped)": "comm_not_overlapped_us",
    "Overlapped": "overlapped_us",
    "Free": "free_us",
    "Stage": "stage_us",
}


def read_step_trace_time(path: str | Path) -> pd.DataFrame:
    """One row per step: step_id, wall_ms and its parts in ms (compute without overlap, overlap,
    exposed communication, idle), and preparing_ms (before the first task; NaN where not exported).
    BadInput naming the file and line for anything unreadable.

    Read with the csv module, not pandas: the file holds a row per step (tens to thousands), and a
    root of a thousand ranks reads a thousand of them, where pandas' fixed cost per file is most of it."""
    path = Path(path)
    header, rows = _csv_rows(path)
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise BadInput(path, f"missing column(s) {', '.join(missing)}", line=1)
    step = header.index("Step")
    if all(step < len(row) and not row[step].strip() for _, row in rows):  # no profiler steps: serving
        rows = []
    values = {name: _numbers(path, rows, header.index(column), column) for column, name in COLUMNS.items()}
    preparing = _numbers(path, rows, header.index("Preparing"), None) if "Preparing" in header else np.nan
    return pd.DataFrame(
        {
            "step_id": values["step_id"].astype("int64"),
            "wall_ms": values["stage_us"] / 1000.0,
            "compute_ms": (values["computing_us"] - values["overlapped_us"]) / 1000.0,
            "overlap_ms": values["overlapped_us"] / 1000.0,
            "exposed_comm_ms": values["comm_not_overlapped_us"] / 1000.0,
            "idle_ms": values["free_us"] / 1000.0,
            "preparing_ms": preparing / 1000.0,  # NaN: the export has no Preparing column (or no number)
        }
    )


def _csv_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(the header, each non-blank row with its line number); BadInput for another encoding, a NUL
    byte, a row wider than the header, or no header."""
    try:
        text = read_input_bytes(path).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(path, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise BadInput(path, f"cannot read file: {exc.strerror or exc}") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        lines = [(reader.line_num, row) for row in reader if row]
    except csv.Error as exc:
        raise BadInput(path, f"not a readable CSV: {exc}", line=reader.line_num) from None
    if not lines:
        raise BadInput(path, "not a readable CSV: no header")
    header = [name.strip() for name in lines[0][1]]
    for line, row in lines[1:]:
        if len(row) > len(header):
            raise BadInput(path, f"not a readable CSV: {len(row)} fields, the header has {len(header)}", line=line)
    return header, lines[1:]


def _numbers(path: Path, rows: list[tuple[int, list[str]]], index: int, column: str | None) -> np.ndarray:
    """Column ``index`` as float64; a cell that is not a finite-or-infinite number is BadInput naming
    ``column`` and its line, or NaN where ``column`` is None (an optional column)."""
    values = np.full(len(rows), np.nan)
    for position, (line, row) in enumerate(rows):
        cell = row[index].strip() if index < len(row) else ""
        try:
            values[position] = float(cell) if "_" not in cell else np.nan  # float() takes "1_000"; CSV does not
        except ValueError:
            pass
        if column is not None and np.isnan(values[position]):
            raise BadInput(path, f"{column}: not a number: {cell!r}", line=line)
    return values
