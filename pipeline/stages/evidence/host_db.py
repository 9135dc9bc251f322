"""The host side of a db export: what trace_view.json's host lanes and launch flows hold, as tables.

The profiler db records the framework's spans (``PYTORCH_API``: Python frames and aten ops, the data
loader's ``__next__`` among them), CANN's API calls (``CANN_API``: launches, stream synchronisations,
copies, allocations) and, through ``connectionId``, which call launched each device task (``TASK``).
``read_db_host_events`` gives the same HostTrace as ``host_trace.read_host_events``: host events
(named as trace_view names them: a CANN call of the acl level is ``AscendCL@<name>``) over a span,
and each task's launch time, so a db root's idle gaps get their host causes like a text root's, and the
device's memory copies (``TASK`` rows of type MEMCPY_ASYNC) and HCCL's data moves in its collectives
(``COMMUNICATION_TASK_INFO``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.sources.profiler_db import connect_readonly, resolve_strings, string_values, table_names
from npuprof.pipeline.stages.evidence.host_trace import COLUMNS, COPY_TASK, LAUNCH_COLUMNS, HostTrace
from npuprof.pipeline.stages.evidence.trace_hccl import HCCL_TASK_COLUMNS, empty_hccl_tasks, joined_hccl_tasks

PYTHON_PROCESS, CANN_PROCESS = "Python", "CANN"
# ENUM_API_TYPE ids of CANN_API rows, and the prefix trace_view gives their names
CANN_LEVELS = {20000: "AscendCL@", 5000: "Runtime@", 10000: "Node@", 5500: "Hccl@", 15000: "Model@"}
HOST_TABLES = ("CANN_API", "STRING_IDS", "TASK")  # and PYTORCH_API where the framework was profiled

SPAN_COLUMNS = ["start_ns", "end_ns", "tid", "level", "name"]
# times are stored as text in some exports: compared and ordered as integers
_SPANS = """
SELECT CAST(h.startNs AS INTEGER) AS start_ns, CAST(h.endNs AS INTEGER) AS end_ns, h.globalTid AS tid,
       {level} AS level, h.name AS name
FROM {table} h
WHERE CAST(h.endNs AS INTEGER) >= ? AND CAST(h.startNs AS INTEGER) <= ?
ORDER BY CAST(h.startNs AS INTEGER) LIMIT ?
"""
_LAUNCHES = """
SELECT CAST(t.startNs AS INTEGER) AS device_start_ns, MIN(CAST(a.startNs AS INTEGER)) AS launch_ns
FROM TASK t JOIN CANN_API a ON a.connectionId = t.connectionId
WHERE CAST(t.startNs AS INTEGER) BETWEEN ? AND ?
GROUP BY t.globalTaskId ORDER BY device_start_ns
"""
# the device's memory copies: TASK rows of CANN's copy task type (the db records no size or direction)
_COPIES = """
SELECT CAST(t.startNs AS INTEGER) AS start_ns, CAST(t.endNs AS INTEGER) AS end_ns, t.streamId AS stream
FROM TASK t JOIN STRING_IDS s ON s.id = t.taskType
WHERE s.value = ? AND CAST(t.endNs AS INTEGER) >= ? AND CAST(t.startNs AS INTEGER) <= ?
ORDER BY CAST(t.startNs AS INTEGER)
"""

# HCCL's data moves in its collectives (COMMUNICATION_TASK_INFO, timed by TASK), as trace_view's Plane
# lanes hold them: the notifies between them (no bytes) are not kept
HCCL_TASK_TABLES = ("COMMUNICATION_TASK_INFO", "ENUM_HCCL_TRANSPORT_TYPE", "ENUM_HCCL_LINK_TYPE")
_HCCL_TASKS = """
SELECT CAST(t.startNs AS INTEGER) AS start_ns, CAST(t.endNs AS INTEGER) AS end_ns, c.taskType AS task_type,
       c.planeId AS plane, tr.name AS transport, lk.name AS link_type, CAST(c.size AS REAL) AS bytes
FROM COMMUNICATION_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId
LEFT JOIN ENUM_HCCL_TRANSPORT_TYPE tr ON tr.id = c.transportType
LEFT JOIN ENUM_HCCL_LINK_TYPE lk ON lk.id = c.linkType
WHERE c.size > 0 AND CAST(t.endNs AS INTEGER) >= ? AND CAST(t.startNs AS INTEGER) <= ?
ORDER BY CAST(t.startNs AS INTEGER), c.planeId
"""


def has_host_tables(path: str | Path) -> bool:
    """Whether the db records the host side at all (a db without it has nothing to give)."""
    con = connect_readonly(Path(path))
    try:
        present = table_names(con)
    except sqlite3.DatabaseError:
        return False
    finally:
        con.close()
    return set(HOST_TABLES) <= present


def _spans(
    con: sqlite3.Connection, table: str, level: str, bounds: tuple[int, int], cap: int, strings: pd.Series
) -> pd.DataFrame:
    """The table's spans over ``bounds`` (at most ``cap`` + 1), named through STRING_IDS (a span whose
    name id is unknown is left out, as a join would)."""
    spans = pd.read_sql_query(_SPANS.format(table=table, level=level), con, params=(*bounds, cap + 1))
    resolve_strings(spans, ["name"], strings)
    return spans[spans["name"].notna()].reset_index(drop=True)


def read_db_host_events(path: str | Path, span_start_us: float, span_end_us: float, cap: int) -> HostTrace:
    """Host events of the db overlapping [span_start_us, span_end_us] (at most ``cap``: the earliest
    of each table) and the launch of each device task in it; BadInput for a db that cannot be read."""
    path = Path(path)
    bounds = (int(span_start_us * 1000), int(span_end_us * 1000))
    con = connect_readonly(path)
    try:
        framework = "PYTORCH_API" in table_names(con)  # a CANN-only (msprof) db has none
        strings, _ = string_values(con)
        python = (
            _spans(con, "PYTORCH_API", "-1", bounds, cap, strings) if framework else pd.DataFrame(columns=SPAN_COLUMNS)
        )
        cann = _spans(con, "CANN_API", "h.type", bounds, cap, strings)
        launches = pd.read_sql_query(_LAUNCHES, con, params=bounds)
        copies = pd.read_sql_query(_COPIES, con, params=(COPY_TASK, *bounds))
        tasks = _hccl_tasks(con, bounds, strings) if set(HCCL_TASK_TABLES) <= table_names(con) else None
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        raise BadInput(path, f"cannot read its host tables: {exc}") from None
    finally:
        con.close()
    dropped = max(len(python) - cap, 0) + max(len(cann) - cap, 0)
    python, cann = python.head(cap), cann.head(cap)
    prefix = cann["level"].map(lambda level: CANN_LEVELS.get(int(level), "") if pd.notna(level) else "")
    events = pd.concat(
        [
            python.assign(process=PYTHON_PROCESS),
            cann.assign(name=prefix + cann["name"].astype(str), process=CANN_PROCESS),
        ],
        ignore_index=True,
    )
    frame = pd.DataFrame(
        {
            "name": events["name"].astype(str).to_numpy(object),
            "pid": events["tid"].to_numpy(np.int64) >> 32 if len(events) else np.array([], dtype=np.int64),
            "tid": events["tid"].to_numpy(np.int64) if len(events) else np.array([], dtype=np.int64),
            "start_us": events["start_ns"].to_numpy(np.int64) / 1000.0,
            "end_us": events["end_ns"].to_numpy(np.int64) / 1000.0,
            "process": events["process"].to_numpy(object),
        }
    )
    frame["duration_us"] = frame["end_us"] - frame["start_us"]
    flows = pd.DataFrame(
        {
            "device_start_us": launches["device_start_ns"].to_numpy(np.int64) / 1000.0,
            "launch_us": launches["launch_ns"].to_numpy(np.int64) / 1000.0,
        }
    )
    events = frame.sort_values("start_us", kind="stable")[COLUMNS].reset_index(drop=True)
    copies = pd.DataFrame(
        {
            "start_us": copies["start_ns"].to_numpy(np.int64) / 1000.0,
            "end_us": copies["end_ns"].to_numpy(np.int64) / 1000.0,
            "bytes": np.full(len(copies), np.nan),
            "direction": pd.Series([None] * len(copies), dtype=object),
            "stream": pd.to_numeric(copies["stream"], errors="coerce").fillna(-1).to_numpy(np.int64),
        }
    )
    return HostTrace(events, dropped, 0, flows[LAUNCH_COLUMNS], copies, empty_hccl_tasks() if tasks is None else tasks)


def _hccl_tasks(con: sqlite3.Connection, bounds: tuple[int, int], strings: pd.Series) -> pd.DataFrame:
    """HCCL's data moves over ``bounds`` as trace_view's reader gives them (HCCL_TASK_COLUMNS): the
    task type named through STRING_IDS, the plane as its trace lane (Plane N is thread N + 1)."""
    tasks = pd.read_sql_query(_HCCL_TASKS, con, params=bounds)
    resolve_strings(tasks, ["task_type"], strings)
    tasks = tasks.assign(
        start_us=tasks["start_ns"].to_numpy(np.int64) / 1000.0,
        end_us=tasks["end_ns"].to_numpy(np.int64) / 1000.0,
        duration_us=(tasks["end_ns"].to_numpy(np.int64) - tasks["start_ns"].to_numpy(np.int64)) / 1000.0,
        plane=pd.to_numeric(tasks["plane"], errors="coerce").fillna(-2).to_numpy(np.int64) + 1,
    )
    return joined_hccl_tasks([], [tasks[HCCL_TASK_COLUMNS]])
