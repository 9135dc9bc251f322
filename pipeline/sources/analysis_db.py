"""analysis.db: the db export's own analysis of its communication, beside ascend_pytorch_profiler_*.db.

torch_npu's db export writes CANN's communication analysis to tables instead of JSON files:
``CommAnalyzerTime`` and ``CommAnalyzerBandwidth`` hold what communication.json holds (per op instance:
elapsed, transit, wait, synchronization and idle ms; per transport: size, time, bandwidth and the packet
size distribution), ``CommAnalyzerMatrix`` what communication_matrix.json holds (per op kind, tier and
link). The readers return the same tables as the JSON readers (``communication_files``), so a db
root's exposed communication splits into transfer, wait and idle like a text root's.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.sources.communication_files import LINK_COLUMNS, OP_COLUMNS, step_id_of
from npuprof.pipeline.sources.profiler_db import connect_readonly, table_names

TIME_TABLE, BANDWIDTH_TABLE, MATRIX_TABLE = "CommAnalyzerTime", "CommAnalyzerBandwidth", "CommAnalyzerMatrix"
KEYS = ["step", "type", "hccl_op_name", "group_name"]


def _tables(path: Path, wanted: list[str]) -> dict[str, pd.DataFrame] | None:
    """The ``wanted`` tables of the file (None when its first is not there: no communication analysed)."""
    con = connect_readonly(path)
    try:
        present = table_names(con)
        if wanted[0] not in present:
            return None
        return {t: pd.read_sql_query(f"SELECT * FROM {t}", con) for t in wanted if t in present}  # noqa: S608
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        raise BadInput(path, f"cannot read its communication analysis: {exc}") from None
    finally:
        con.close()


def _step_ids(path: Path, table: str, steps: pd.Series) -> np.ndarray:
    """Step ids of the ``step<id>`` labels (None for a capture without steps); BadInput for another label."""
    ids = {}
    for label in pd.unique(steps.astype(str)):  # a loop over the capture's few step labels
        try:
            ids[label] = step_id_of(label)
        except ValueError as exc:
            raise BadInput(path, f"{table}.step: {exc}") from None
    return steps.astype(str).map(ids).to_numpy(object)


def _numbers(path: Path, table: str, frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``columns`` of ``frame`` as floats; BadInput naming the first one that is not a number."""
    values = frame[columns].apply(pd.to_numeric, errors="coerce")
    bad = values.isna() & frame[columns].notna()
    if bad.any().any():
        column = bad.any().idxmax()
        raise BadInput(path, f"{table}.{column}: not a number: {frame.loc[bad[column], column].iloc[0]!r}")
    return values


def read_analysis_ops(path: str | Path) -> pd.DataFrame | None:
    """One row per op instance (``OP_COLUMNS``), as read_communication_json gives them; None when the
    file holds no communication analysis."""
    path = Path(path)
    tables = _tables(path, [TIME_TABLE, BANDWIDTH_TABLE])
    if tables is None:
        return None
    times = tables[TIME_TABLE]
    fields = ["start_timestamp", "elapse_time", "transit_time", "wait_time", "synchronization_time", "idle_time"]
    values = _numbers(path, TIME_TABLE, times, fields)
    ops = pd.DataFrame(
        {
            "step_id": _step_ids(path, TIME_TABLE, times["step"]),
            "op_scope": times["type"].astype(str).to_numpy(),
            "op_name": times["hccl_op_name"].astype(str).to_numpy(),
            "group_hash": times["group_name"].astype(str).to_numpy(),
            "start_us": values["start_timestamp"].to_numpy(),
            "elapse_ms": values["elapse_time"].to_numpy(),
            "transit_ms": values["transit_time"].to_numpy(),
            "wait_ms": values["wait_time"].to_numpy(),
            "synchronization_ms": values["synchronization_time"].to_numpy(),
            "idle_ms": values["idle_time"].to_numpy(),
        }
    )
    bandwidth = tables.get(BANDWIDTH_TABLE)
    if bandwidth is not None and len(bandwidth):
        ops = _with_transports(path, ops, times, bandwidth)
    return ops.reindex(columns=OP_COLUMNS)


def _with_transports(path: Path, ops: pd.DataFrame, times: pd.DataFrame, bandwidth: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with each transport's size / time / bandwidth, and the packet sizes of the busiest one
    (``<MB>x<count>;…``, as the JSON's Size Distribution gives them)."""
    measured = ["transit_size", "transit_time", "bandwidth", "package_size", "count"]
    bandwidth = pd.concat(
        [bandwidth[[*KEYS, "transport_type"]].astype(str), _numbers(path, BANDWIDTH_TABLE, bandwidth, measured)],
        axis=1,
    )
    bandwidth = bandwidth[bandwidth["transport_type"].isin(schema.TRANSPORTS)]
    per_transport = bandwidth.groupby([*KEYS, "transport_type"], sort=False)[measured[:3]].first()
    wide = per_transport.unstack("transport_type")
    at = pd.MultiIndex.from_frame(times[KEYS].astype(str))
    for transport in pd.unique(bandwidth["transport_type"]):
        prefix = transport.lower()
        for source, column in zip(measured[:3], ("size_mb", "time_ms", "bandwidth_gbps")):
            ops[f"{prefix}_{column}"] = wide[(source, transport)].reindex(at).to_numpy()
    # the first of the largest, in the table's order (the JSON reader keeps the first of equal sizes)
    busiest = per_transport["transit_size"].reset_index().sort_values("transit_size", ascending=False, kind="stable")
    busiest = busiest.drop_duplicates(KEYS, keep="first")
    packets = bandwidth.merge(busiest[[*KEYS, "transport_type"]], on=[*KEYS, "transport_type"])
    packets = packets[packets["count"] > 0]
    ops["packet_sizes_mb"] = ""
    if len(packets):
        bucket = packets["package_size"].map(str)
        packets = packets.assign(text=bucket + "x" + packets["count"].astype(int).astype(str), bucket=bucket)
        packets = packets.sort_values([*KEYS, "bucket"])
        joined = packets.groupby(KEYS, sort=False)["text"].agg(";".join)
        ops["packet_sizes_mb"] = joined.reindex(at).fillna("").to_numpy()
    return ops


def read_analysis_links(path: str | Path) -> pd.DataFrame | None:
    """One row per link (``LINK_COLUMNS``), as read_communication_matrix gives them; None when the file
    holds no link analysis."""
    path = Path(path)
    tables = _tables(path, [MATRIX_TABLE])
    if tables is None:
        return None
    matrix = tables[MATRIX_TABLE]
    label = matrix["hccl_op_name"].astype(str).str.rpartition("-")  # <op kind>-<tier>
    ranks = _numbers(path, MATRIX_TABLE, matrix, ["src_rank", "dst_rank"])
    values = _numbers(path, MATRIX_TABLE, matrix, ["transit_size", "transit_time", "bandwidth"])
    links = pd.DataFrame(
        {
            "step_id": _step_ids(path, MATRIX_TABLE, matrix["step"]),
            "op_scope": matrix["type"].astype(str).to_numpy(),
            "op_kind": label[0].to_numpy(),
            "tier": label[2].to_numpy(),
            "group_hash": matrix["group_name"].astype(str).to_numpy(),
            "src_local_rank": ranks["src_rank"].astype("int64").to_numpy(),
            "dst_local_rank": ranks["dst_rank"].astype("int64").to_numpy(),
            "transport": matrix["transport_type"].astype(str).to_numpy(),
            "size_mb": values["transit_size"].to_numpy(),
            "time_ms": values["transit_time"].to_numpy(),
            "bandwidth_gbps": values["bandwidth"].to_numpy(),
            "op_name": matrix["op_name"].astype(str).to_numpy(),
        }
    )
    return links.reindex(columns=LINK_COLUMNS)
