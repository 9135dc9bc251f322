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


def _op_row(path: Path, step: int | None, scope: str, key: str, info: object) -> dict:
    name, _, group = key.partition("@")
    if not isinstance(info, dict):
        raise BadInput(path, f"step {step} {scope} {key}: expected an object")
    times = info.get("Communication Time Info") or {}
    row: dict = {
        "step_id": step,
        "op_scope": scope,
        "op_name": name,
        "group_hash": group or None,
        "packet_sizes_mb": "",
    }
    for field, column in _TIME_FIELDS.items():
        row[column] = _number(path, key, field, times[field]) if field in times else None
    busiest = -1.0
    for transport, values in (info.get("Communication Bandwidth Info") or {}).items():
        prefix = transport.lower()
        if transport not in schema.TRANSPORTS or not isinstance(values, dict):
            continue
        row[f"{prefix}_size_mb"] = _number(path, key, transport, values.get("Transit Size(MB)", 0))
        row[f"{prefix}_time_ms"] = _number(path, key, transport, values.get("Transit Time(ms)", 0))
        row[f"{prefix}_bandwidth_gbps"] = _number(path, key, transport, values.get("Bandwidth(GB/s)", 0))
        if row[f"{prefix}_size_mb"] > busiest:  # transports repeat one distribution: keep the busiest's
            busiest = row[f"{prefix}_size_mb"]
            distribution = values.get("Size Distribution") or {}
            row["packet_sizes_mb"] = ";".join(f"{size}x{int(entry[0])}" for size, entry in sorted(distribution.items()))
    return row


def read_communication_json(path: str | Path) -> pd.DataFrame:
    """One row per op instance of a rank's communication.json (``OP_COLUMNS``)."""
    path = Path(path)
    rows = []
    for step, scopes in _steps(path, read_json(path)).items():
        for scope in ("collective", "p2p"):
            for key, info in (scopes.get(scope) or {}).items():
                if not str(key).startswith("Total"):
                    rows.append(_op_row(path, step, scope, str(key), info))
    return pd.DataFrame(rows, columns=OP_COLUMNS)


def read_communication_matrix(path: str | Path) -> pd.DataFrame:
    """One row per link of a rank's communication_matrix.json (``LINK_COLUMNS``)."""
    path = Path(path)
    rows = []
    for step, scopes in _steps(path, read_json(path)).items():
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
