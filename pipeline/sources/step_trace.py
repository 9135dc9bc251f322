"""step_trace_time.csv: the profiler's own per-step split of one rank (µs), read for ranks whose
kernels the capture does not hold, so every rank still has a step breakdown (labelled as its source).

Columns as the vendor publishes them: ``Stage`` is the step's wall, made of ``Computing`` (which
includes ``Overlapped``, compute beside communication), ``Communication(Not Overlapped)`` and
``Free`` (the device idle). ``Preparing`` (newer exports) is the time from the profiler's step start
to the step's first device task: where each step starts (segment).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from npuprof.pipeline.errors import BadInput

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
    BadInput naming the file and line for anything unreadable."""
    path = Path(path)
    try:
        raw = pd.read_csv(path, encoding="utf-8", dtype=str, keep_default_na=False)
    except UnicodeDecodeError as exc:
        raise BadInput(path, f"not UTF-8 text (byte {exc.start})") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise BadInput(path, f"not a readable CSV: {' '.join(str(exc).split())}") from None
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        raise BadInput(path, f"missing column(s) {', '.join(missing)}", line=1)
    values = {}
    for column, name in COLUMNS.items():
        parsed = pd.to_numeric(raw[column].str.strip(), errors="coerce")
        bad = parsed.isna()
        if bad.any():
            line = int(bad.to_numpy().argmax()) + 2  # the header is line 1
            raise BadInput(path, f"{column}: not a number: {raw[column].iloc[line - 2]!r}", line=line)
        values[name] = parsed
    frame = pd.DataFrame(values)
    preparing = pd.to_numeric(raw["Preparing"].str.strip(), errors="coerce") if "Preparing" in raw else np.nan
    return pd.DataFrame(
        {
            "step_id": frame["step_id"].astype("int64"),
            "wall_ms": frame["stage_us"] / 1000.0,
            "compute_ms": (frame["computing_us"] - frame["overlapped_us"]) / 1000.0,
            "overlap_ms": frame["overlapped_us"] / 1000.0,
            "exposed_comm_ms": frame["comm_not_overlapped_us"] / 1000.0,
            "idle_ms": frame["free_us"] / 1000.0,
            "preparing_ms": preparing / 1000.0,  # NaN: the export has no Preparing column (or no number)
        }
    )
