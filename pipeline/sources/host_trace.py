"""trace_view.json, streamed: the host-side events that overlap a time span.

The file can be GBs (a top-level array from torch_npu, or ``{"traceEvents": [...]}``); it is parsed
incrementally (ijson, C backend) and never held whole. Only complete (``X``) events of host lanes
are kept: category cpu_op / python_function / ascendcl, or any event of a process labelled CPU
(CANN's AscendCL events carry no category), that overlap the span, up to a cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import ijson
import pandas as pd

from npuprof.pipeline.errors import BadInput

HOST_CATEGORIES = frozenset({"cpu_op", "python_function", "ascendcl"})
HOST_PROCESS_NAMES = frozenset({"Python", "CANN", "Python GC"})
COLUMNS = ["name", "pid", "tid", "start_us", "end_us"]


@dataclass(frozen=True)
class HostTrace:
    """Host events in the span, and how many were dropped at the cap."""

    events: pd.DataFrame
    dropped: int
    bytes_read: int


def _prefix(path: Path) -> str:
    with open(path, "rb") as handle:
        head = handle.read(4096).lstrip()
    if head[:1] == b"[":
        return "item"
    if head[:1] == b"{":
        return "traceEvents.item"
    raise BadInput(path, "not a Chrome trace: expected a JSON array or an object with traceEvents")


def _number(value: object) -> float:
    try:
        return float(value)  # ts is a string of µs in torch_npu's traces, dur a number
    except (TypeError, ValueError):
        return float("nan")


def read_host_events(path: str | Path, span_start_us: float, span_end_us: float, cap: int) -> HostTrace:
    """Host X events of ``path`` overlapping [span_start_us, span_end_us], at most ``cap`` of them."""
    path = Path(path)
    kept: list[tuple] = []
    host_pids: set = set()
    dropped = 0
    with open(path, "rb") as handle:
        try:
            for event in ijson.items(handle, _prefix(path), use_float=True):  # a streaming parse, one event at a time
                if not isinstance(event, dict):
                    continue
                phase = event.get("ph")
                if phase == "M":
                    args = event.get("args") or {}
                    if (event.get("name") == "process_name" and args.get("name") in HOST_PROCESS_NAMES) or (
                        event.get("name") == "process_labels" and args.get("labels") == "CPU"
                    ):
                        host_pids.add(event.get("pid"))
                    continue
                if phase != "X":
                    continue
                start, duration = _number(event.get("ts")), _number(event.get("dur"))
                if not duration > 0 or start > span_end_us or start + duration < span_start_us:
                    continue
                if len(kept) >= cap:
                    dropped += 1
                    continue
                category = str(event.get("cat") or "").lower()
                kept.append((event.get("name"), event.get("pid"), event.get("tid"), start, start + duration, category))
        except ijson.JSONError as exc:
            raise BadInput(path, f"broken JSON near byte {handle.tell()}: {exc}") from None
        size = handle.tell()
    frame = pd.DataFrame(kept, columns=[*COLUMNS, "category"])
    is_host = frame["category"].isin(HOST_CATEGORIES) | frame["pid"].isin(host_pids)
    frame = frame[is_host].drop(columns="category").reset_index(drop=True)
    frame["name"] = frame["name"].astype(str)
    return HostTrace(frame, dropped, size)
