"""Readers of a rank's communication.json and communication_matrix.json (input-formats §2.7–2.8).

communication.json: per step, per collective / p2p op instance (``<op name>@<group hash>``), how
its elapsed time splits into transit, wait, synchronization and idle, and what each transport
(RDMA, HCCS, PCIE, SDMA, SIO) moved at what bandwidth. communication_matrix.json: per step, per
op kind and tier (top1 / middle / bottom / total), per link ``src-dst`` (local ranks of the group),
the transport, size, time and bandwidth. Keys starting ``Total`` are sums and are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.io import read_json

_STEP = re.compile(r"^step(\d*)$")
_TIME_FIELDS = {
    "Start Timestamp(us)": "start_us",
    "Elapse Time(ms)": "elapse_ms",
    "Transit Time(ms)": "transit_ms",
    "Wait Time(ms)": "wait_ms",
    "Synchronization Time(ms)": "synchronization_ms",
    "Idle Time(ms)": "idle_ms",
}
# what the files give (parallel_role and source are added by summarize)
OP_COLUMNS = [c for c in schema.COMMUNICATION_OPS.columns if c not in ("parallel_role", "source")]
LINK_COLUMNS = [c for c in schema.COMMUNICATION_LINKS.columns if c != "parallel_role"]


def _steps(path: Path, data: object) -> dict[int | None, dict]:
    """{step id (None: "step" without a number): that step's {collective, p2p}}."""
    if not isinstance(data, dict):
        raise BadInput(path, 'expected a JSON object of steps ("step<id>": ...)')
    steps = {}
    for key, value in data.items():
        match = _STEP.match(str(key))
        if match is None or not isinstance(value, dict):
            raise BadInput(path, f'unexpected top-level key {key!r} (expected "step<id>" objects)')
        steps[int(match.group(1)) if match.group(1) else None] = value
    return steps


def _number(path: Path, key: str, field: str, value: object) -> float:
    """``value`` as a float; BadInput naming the op and field otherwise (the message is only
    formatted on error: a decode capture has millions of these fields)."""
    kind = type(value)
    if kind is float or kind is int:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(path, f"{key} {field}: not a number: {value!r}")
    return float(value)


def _transport_values(path: Path, key: str, info: dict, index: int, sparse: dict[str, dict[int, object]]) -> str:
    """Record op ``index``'s per-transport size / time / bandwidth in ``sparse``; the busiest
    transport's packet size distribution (transports repeat one distribution)."""
    busiest, packets = -1.0, ""
    for transport, values in (info.get("Communication Bandwidth Info") or {}).items():
        if transport not in schema.TRANSPORTS or not isinstance(values, dict):
            continue
        prefix = transport.lower()
        size = _number(path, key, transport, values.get("Transit Size(MB)", 0))
        sparse[f"{prefix}_size_mb"][index] = size
        sparse[f"{prefix}_time_ms"][index] = _number(path, key, transport, values.get("Transit Time(ms)", 0))
        sparse[f"{prefix}_bandwidth_gbps"][index] = _number(path, key, transport, values.get("Bandwidth(GB/s)", 0))
        if size > busiest:
            busiest = size
            distribution = values.get("Size Distribution") or {}
            packets = ";".join(f"{bucket}x{int(entry[0])}" for bucket, entry in sorted(distribution.items()))
    return packets


def read_communication_json(path: str | Path) -> pd.DataFrame:
    """One row per op instance of a rank's communication.json (``OP_COLUMNS``), built column by
    column (decode captures hold a hundred thousand ops per rank)."""
    path = Path(path)
    dense: dict[str, list] = {c: [] for c in ("step_id", "op_scope", "op_name", "group_hash", "packet_sizes_mb")}
    dense.update({column: [] for column in _TIME_FIELDS.values()})
    sparse: dict[str, dict[int, object]] = {c: {} for c in OP_COLUMNS if c not in dense}
    times = list(_TIME_FIELDS.items())
    for step, scopes in _steps(path, read_json(path, finite=True)).items():
        for scope in ("collective", "p2p"):
            for key, info in (scopes.get(scope) or {}).items():
                key = str(key)
                if key.startswith("Total"):
                    continue
                if not isinstance(info, dict):
                    raise BadInput(path, f"step {step} {scope} {key}: expected an object")
                name, _, group = key.partition("@")
                measured = info.get("Communication Time Info") or {}
                for field, column in times:
                    dense[column].append(_number(path, key, field, measured[field]) if field in measured else None)
                dense["packet_sizes_mb"].append(_transport_values(path, key, info, len(dense["step_id"]), sparse))
                dense["step_id"].append(step)
                dense["op_scope"].append(scope)
                dense["op_name"].append(name)
                dense["group_hash"].append(group or None)
    count = len(dense["step_id"])
    columns: dict[str, object] = dict(dense)
    for column, values in sparse.items():  # NaN where the op did not use that transport
        filled = np.full(count, np.nan)
        filled[list(values)] = list(values.values())
        columns[column] = filled
    return pd.DataFrame(columns, columns=OP_COLUMNS)


def read_communication_matrix(path: str | Path) -> pd.DataFrame:
    """One row per link of a rank's communication_matrix.json (``LINK_COLUMNS``)."""
    path = Path(path)
    rows = []
    for step, scopes in _steps(path, read_json(path, finite=True)).items():
        for scope in ("collective", "p2p"):
            for key, links in (scopes.get(scope) or {}).items():
                label, _, group = str(key).partition("@")
                kind, _, tier = label.rpartition("-")
                if not isinstance(links, dict):
                    raise BadInput(path, f"step {step} {scope} {key}: expected an object of links")
                for link, values in links.items():
                    src, _, dst = str(link).partition("-")
                    if not (src.isdigit() and dst.isdigit()) or not isinstance(values, dict):
                        raise BadInput(path, f'step {step} {key}: bad link {link!r} (expected "<src>-<dst>")')
                    rows.append(
                        {
                            "step_id": step,
                            "op_scope": scope,
                            "op_kind": kind,
                            "tier": tier,
                            "group_hash": group or None,
                            "src_local_rank": int(src),
                            "dst_local_rank": int(dst),
                            "transport": values.get("Transport Type"),
                            "size_mb": _number(path, key, link, values.get("Transit Size(MB)", 0)),
                            "time_ms": _number(path, key, link, values.get("Transit Time(ms)", 0)),
                            "bandwidth_gbps": _number(path, key, link, values.get("Bandwidth(GB/s)", 0)),
                            "op_name": values.get("Op Name"),
                        }
                    )
    return pd.DataFrame(rows, columns=LINK_COLUMNS)
