"""Readers of a rank's communication.json and communication_matrix.json (input-formats §2.7–2.8).

communication.json: per step, per collective / p2p op instance (``<op name>@<group hash>``), how
its elapsed time splits into transit, wait, synchronization and idle, and what each transport
(RDMA, HCCS, PCIE, SDMA, SIO) moved at what bandwidth. communication_matrix.json: per step, per
op kind and tier (top1 / middle / bottom / total), per link ``src-dst`` (local ranks of the group),
the transport, size, time and bandwidth. Keys starting ``Total`` are sums and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.input_files import read_input_bytes, read_input_json

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


# Typed decoders of the two files: msgspec builds only the fields read, in C, from the bytes (a decode
# capture's files are tens of MB per rank). A file they refuse (a wrong type, null, NaN, an out-of-range
# number, a BOM, bytes that are not UTF-8) goes to the checked reader, which says what is wrong and
# where; a file both accept gives the same table.
class _OpTimes(msgspec.Struct, gc=False):
    start_us: float = msgspec.field(name="Start Timestamp(us)", default=None)
    elapse_ms: float = msgspec.field(name="Elapse Time(ms)", default=None)
    transit_ms: float = msgspec.field(name="Transit Time(ms)", default=None)
    wait_ms: float = msgspec.field(name="Wait Time(ms)", default=None)
    synchronization_ms: float = msgspec.field(name="Synchronization Time(ms)", default=None)
    idle_ms: float = msgspec.field(name="Idle Time(ms)", default=None)


class _Transport(msgspec.Struct, gc=False):
    size_mb: float = msgspec.field(name="Transit Size(MB)", default=0.0)
    time_ms: float = msgspec.field(name="Transit Time(ms)", default=0.0)
    bandwidth_gbps: float = msgspec.field(name="Bandwidth(GB/s)", default=0.0)
    distribution: dict[str, list[float]] = msgspec.field(name="Size Distribution", default_factory=dict)


class _Op(msgspec.Struct, gc=False):
    times: _OpTimes = msgspec.field(name="Communication Time Info", default_factory=_OpTimes)
    transports: dict[str, _Transport] = msgspec.field(name="Communication Bandwidth Info", default_factory=dict)


class _OpStep(msgspec.Struct, gc=False):
    collective: dict[str, _Op] = {}
    p2p: dict[str, _Op] = {}


class _Link(msgspec.Struct, gc=False):
    transport: Any = msgspec.field(name="Transport Type", default=None)
    size_mb: float = msgspec.field(name="Transit Size(MB)", default=0.0)
    time_ms: float = msgspec.field(name="Transit Time(ms)", default=0.0)
    bandwidth_gbps: float = msgspec.field(name="Bandwidth(GB/s)", default=0.0)
    op_name: Any = msgspec.field(name="Op Name", default=None)


class _LinkStep(msgspec.Struct, gc=False):
    collective: dict[str, dict[str, _Link]] = {}
    p2p: dict[str, dict[str, _Link]] = {}


_OP_FILE = msgspec.json.Decoder(dict[str, _OpStep])
_LINK_FILE = msgspec.json.Decoder(dict[str, _LinkStep])


def _typed(path: Path, decoder: msgspec.json.Decoder) -> dict[int | None, Any] | None:
    """{step id: its decoded scopes}, or None when the typed decoder (or a step key) refuses the file."""
    try:
        decoded = decoder.decode(read_input_bytes(path))
    except (OSError, msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None  # nested deeper than the decoder goes, too: the checked reader names what is wrong
    steps = {}
    for key, value in decoded.items():
        match = _STEP.match(key)
        if match is None:
            return None
        steps[_step_id(match)] = value
    return steps


def read_communication_json(path: str | Path) -> pd.DataFrame:
    """One row per op instance of a rank's communication.json (``OP_COLUMNS``), built column by
    column (decode captures hold a hundred thousand ops per rank)."""
    path = Path(path)
    steps = _typed(path, _OP_FILE)
    if steps is None:
        return _checked_ops(path)
    entries = [
        (step, scope, key.partition("@"), op)
        for step, scopes in steps.items()
        for scope, ops in (("collective", scopes.collective), ("p2p", scopes.p2p))
        for key, op in ops.items()
        if not key.startswith("Total")
    ]
    dense, sparse = _op_columns()
    dense.update(
        step_id=[e[0] for e in entries],
        op_scope=[e[1] for e in entries],
        op_name=[e[2][0] for e in entries],
        group_hash=[e[2][2] or None for e in entries],
        packet_sizes_mb=[
            _recorded_transports(_typed_transports(e[3].transports), index, sparse) for index, e in enumerate(entries)
        ],
    )
    for column in _TIME_FIELDS.values():
        dense[column] = [getattr(e[3].times, column) for e in entries]
    return _op_frame(dense, sparse)


def _recorded_transports(measured: Iterable[tuple], index: int, sparse: dict[str, dict[int, object]]) -> str:
    """Record op ``index``'s per-transport size / time / bandwidth in ``sparse``; the busiest
    transport's packet size distribution (transports repeat one distribution). ``measured``: (transport,
    size MB, time ms, bandwidth GB/s, size distribution) of each transport the schema knows."""
    busiest, packets = -1.0, ""
    for transport, size, time_ms, bandwidth, distribution in measured:
        prefix = transport.lower()
        sparse[f"{prefix}_size_mb"][index] = size
        sparse[f"{prefix}_time_ms"][index] = time_ms
        sparse[f"{prefix}_bandwidth_gbps"][index] = bandwidth
        if size > busiest:
            busiest = size
            packets = ";".join(f"{bucket}x{int(entry[0])}" for bucket, entry in sorted(distribution.items()))
    return packets


def _typed_transports(transports: dict[str, _Transport]) -> Iterator[tuple]:
    """The measured transports of a decoded op, for ``_recorded_transports``."""
    for transport, values in transports.items():
        if transport in schema.TRANSPORTS:
            yield transport, values.size_mb, values.time_ms, values.bandwidth_gbps, values.distribution


def read_communication_matrix(path: str | Path) -> pd.DataFrame:
    """One row per link of a rank's communication_matrix.json (``LINK_COLUMNS``)."""
    path = Path(path)
    steps = _typed(path, _LINK_FILE)
    if steps is None:
        return _checked_links(path)
    links = [
        (step, scope, key, link, values)
        for step, scopes in steps.items()
        for scope, kinds in (("collective", scopes.collective), ("p2p", scopes.p2p))
        for key, by_link in kinds.items()
        for link, values in by_link.items()
    ]
    # a file repeats a few op labels and links thousands of times: each distinct one is parsed once
    labels = {key: _link_label(key) for key in {entry[2] for entry in links}}
    pairs = {link: _link_pair(link) for link in {entry[3] for entry in links}}
    if None in pairs.values():
        return _checked_links(path)  # which names the link at fault
    columns = {
        "step_id": [entry[0] for entry in links],
        "op_scope": [entry[1] for entry in links],
        "op_kind": [labels[entry[2]][0] for entry in links],
        "tier": [labels[entry[2]][1] for entry in links],
        "group_hash": [labels[entry[2]][2] for entry in links],
        "src_local_rank": [pairs[entry[3]][0] for entry in links],
        "dst_local_rank": [pairs[entry[3]][1] for entry in links],
        "transport": [entry[4].transport for entry in links],
        "size_mb": [entry[4].size_mb for entry in links],
        "time_ms": [entry[4].time_ms for entry in links],
        "bandwidth_gbps": [entry[4].bandwidth_gbps for entry in links],
        "op_name": [entry[4].op_name for entry in links],
    }
    if not columns["step_id"]:
        return pd.DataFrame([], columns=LINK_COLUMNS)
    return pd.DataFrame(columns, columns=LINK_COLUMNS)


def _link_label(key: str) -> tuple[str, str, str | None]:
    """(op kind, tier, group hash) of a matrix key ``<kind>-<tier>@<group hash>``."""
    label, _, group = key.partition("@")
    kind, _, tier = label.rpartition("-")
    return kind, tier, group or None


def _link_pair(link: str) -> tuple[int, int] | None:
    """(src, dst) local ranks of a link ``<src>-<dst>``; None when it is not one."""
    src, _, dst = link.partition("-")
    return (int(src), int(dst)) if src.isdigit() and dst.isdigit() else None


def _steps(path: Path, data: object) -> dict[int | None, dict]:
    """{step id (None: "step" without a number): that step's {collective, p2p}}."""
    if not isinstance(data, dict):
        raise BadInput(path, 'expected a JSON object of steps ("step<id>": ...)')
    steps = {}
    for key, value in data.items():
        match = _STEP.match(str(key))
        if match is None or not isinstance(value, dict):
            raise BadInput(path, f'unexpected top-level key {key!r} (expected "step<id>" objects)')
        steps[_step_id(match)] = value
    return steps


def _step_id(match: re.Match) -> int | None:
    """The id of a matched ``step<id>`` key (None: "step" without a number)."""
    return int(match.group(1)) if match.group(1) else None


def step_id_of(label: str) -> int | None:
    """The id of a ``step<id>`` label (None: "step" without a number); ValueError for another label."""
    match = _STEP.match(label)
    if match is None:
        raise ValueError(f"{label!r} is not step<id>")
    return _step_id(match)


def _number(path: Path, key: str, field: str, value: object) -> float:
    """``value`` as a float; BadInput naming the op and field otherwise (the message is only
    formatted on error: a decode capture has millions of these fields)."""
    kind = type(value)
    if kind is float or kind is int:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(path, f"{key} {field}: not a number: {value!r}")
    return float(value)


def _checked_transports(path: Path, key: str, info: dict) -> Iterator[tuple]:
    """The measured transports of op ``key``, each number checked, for ``_recorded_transports``."""
    for transport, values in (info.get("Communication Bandwidth Info") or {}).items():
        if transport not in schema.TRANSPORTS or not isinstance(values, dict):
            continue
        yield (
            transport,
            _number(path, key, transport, values.get("Transit Size(MB)", 0)),
            _number(path, key, transport, values.get("Transit Time(ms)", 0)),
            _number(path, key, transport, values.get("Bandwidth(GB/s)", 0)),
            values.get("Size Distribution") or {},
        )


def _checked_ops(path: Path) -> pd.DataFrame:
    """communication.json through the standard parser, every value checked as it is read: the reader
    of a file the typed decoder refuses, whose BadInput names the op and field at fault."""
    dense, sparse = _op_columns()
    times = list(_TIME_FIELDS.items())
    for step, scopes in _steps(path, read_input_json(path, finite=True)).items():
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
                measured_transports = _checked_transports(path, key, info)
                dense["packet_sizes_mb"].append(
                    _recorded_transports(measured_transports, len(dense["step_id"]), sparse)
                )
                dense["step_id"].append(step)
                dense["op_scope"].append(scope)
                dense["op_name"].append(name)
                dense["group_hash"].append(group or None)
    return _op_frame(dense, sparse)


def _op_columns() -> tuple[dict[str, list], dict[str, dict[int, object]]]:
    """The columns of the op table as they fill: dense ones (a value per op) and the per-transport
    ones (sparse: {op index: value}, most ops use one transport)."""
    dense: dict[str, list] = {c: [] for c in ("step_id", "op_scope", "op_name", "group_hash", "packet_sizes_mb")}
    dense.update({column: [] for column in _TIME_FIELDS.values()})
    return dense, {c: {} for c in OP_COLUMNS if c not in dense}


def _op_frame(dense: dict[str, list], sparse: dict[str, dict[int, object]]) -> pd.DataFrame:
    count = len(dense["step_id"])
    columns: dict[str, object] = dict(dense)
    for column, values in sparse.items():  # NaN where the op did not use that transport
        filled = np.full(count, np.nan)
        filled[list(values)] = list(values.values())
        columns[column] = filled
    return pd.DataFrame(columns, columns=OP_COLUMNS)


def _checked_links(path: Path) -> pd.DataFrame:
    """communication_matrix.json through the standard parser, every value checked as it is read."""
    rows = []
    for step, scopes in _steps(path, read_input_json(path, finite=True)).items():
        for scope in ("collective", "p2p"):
            for key, links in (scopes.get(scope) or {}).items():
                kind, tier, group = _link_label(str(key))
                if not isinstance(links, dict):
                    raise BadInput(path, f"step {step} {scope} {key}: expected an object of links")
                for link, values in links.items():
                    pair = _link_pair(str(link))
                    if pair is None or not isinstance(values, dict):
                        raise BadInput(path, f'step {step} {key}: bad link {link!r} (expected "<src>-<dst>")')
                    rows.append(
                        {
                            "step_id": step,
                            "op_scope": scope,
                            "op_kind": kind,
                            "tier": tier,
                            "group_hash": group,
                            "src_local_rank": pair[0],
                            "dst_local_rank": pair[1],
                            "transport": values.get("Transport Type"),
                            "size_mb": _number(path, key, link, values.get("Transit Size(MB)", 0)),
                            "time_ms": _number(path, key, link, values.get("Transit Time(ms)", 0)),
                            "bandwidth_gbps": _number(path, key, link, values.get("Bandwidth(GB/s)", 0)),
                            "op_name": values.get("Op Name"),
                        }
                    )
    return pd.DataFrame(rows, columns=LINK_COLUMNS)
