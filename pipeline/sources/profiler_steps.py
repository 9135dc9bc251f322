"""Where the profiler started each step: the host's ``ProfilerStep#N``, as the rank's export records it.

A step's device work starts at its first kernel, but the step itself starts earlier, when the
training loop enters ``ProfilerStep#N``: ``for batch in loader:`` and the host-to-device copy of the
batch run there, before anything is launched. The profiler writes that start down twice: as the
``Preparing`` column of step_trace_time.csv (first task − step start, µs) and as STEP_TIME.startNs of
the profiler db. Either is read here (the CSV first: it is what the text export's own split uses).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.sources.auxiliary import read_auxiliary
from npuprof.pipeline.sources.discovery import RankInput
from npuprof.pipeline.sources.profiler_db import connect_readonly, table_names
from npuprof.pipeline.sources.step_trace import read_step_trace_time

STEP_TRACE = "step_trace_time.csv Preparing"
DB_STEP_TIME = "profiler db STEP_TIME"
FALLBACK = "its steps start at their first kernel (the time before it is not counted)"


def _from_db(path: Path) -> pd.DataFrame:
    """step_id and start_ns (int64) of every STEP_TIME row (empty without the table)."""
    con = connect_readonly(path)
    try:
        if "STEP_TIME" not in table_names(con):
            return pd.DataFrame({"step_id": [], "start_ns": []}, dtype="int64")
        found = pd.read_sql_query("SELECT id AS step_id, startNs AS start_ns FROM STEP_TIME", con)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        raise BadInput(path, f"STEP_TIME unreadable: {exc}") from None
    finally:
        con.close()
    return found.apply(pd.to_numeric, errors="coerce").dropna().astype("int64")


def profiler_step_starts(rank: RankInput) -> tuple[pd.DataFrame, str | None, dict | None]:
    """(per step: step_id and start_ns — when the profiler started it — or preparing_ns — how long
    before its first task —, both int64; where they came from; the note of an unreadable source).
    Empty, with no source, where the rank's export records neither."""
    nothing = pd.DataFrame({"step_id": [], "start_ns": []}, dtype="int64")
    path = rank.supplemental.get("step_trace_time_csv")
    if path:
        frame, note = read_auxiliary(read_step_trace_time, path, rank.rank_id, FALLBACK)
        preparing_ms = frame["preparing_ms"].to_numpy(float) if frame is not None else np.array([])
        known = ~np.isnan(preparing_ms)
        if known.any():  # NumPy, not pandas: a root of a thousand ranks asks this a thousand times
            preparing_ns = np.round(preparing_ms[known] * 1e6).astype("int64")
            found = pd.DataFrame({"step_id": frame["step_id"].to_numpy()[known], "preparing_ns": preparing_ns})
            return found, STEP_TRACE, None
        if note:
            return nothing, None, note
    if len(rank.profiler_dbs) == 1:
        found, note = read_auxiliary(_from_db, rank.profiler_dbs[0], rank.rank_id, FALLBACK)
        if found is not None and len(found):
            return found, DB_STEP_TIME, None
        return nothing, None, note
    return nothing, None, None
