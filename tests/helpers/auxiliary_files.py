"""Each auxiliary file of a capture, the ways real captures break it, and the fallback the analysis
takes without it (the degraded-input tests, local and through the service)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from npuprof.pipeline import schema


def _wrong_type(text: str) -> str:
    return "[1, 2, 3]"


def _nan(text: str) -> str:
    # the first number of the file becomes NaN: json accepts it, a capture's file must not hold it
    return re.sub(r"(:\s*)(-?\d[\d.eE+-]*)", r"\1NaN", text, count=1)


def _truncated(text: str) -> str:
    return text[: len(text) // 2]


CORRUPTIONS = {
    "wrong_type": lambda path: path.write_text(_wrong_type(path.read_text("utf-8")), "utf-8"),
    "nan": lambda path: path.write_text(_nan(path.read_text("utf-8")), "utf-8"),
    "garbage": lambda path: path.write_bytes(bytes(range(256)) * 8),
    "truncated": lambda path: path.write_text(_truncated(path.read_text("utf-8")), "utf-8"),
    "utf16": lambda path: path.write_text(path.read_text("utf-8"), "utf-16"),
    # 100,000 nested lists in a small file: a RecursionError in the parser, never a crash
    "deep": lambda path: path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "utf-8"),
}


def _rank0_links_missing(out: Path) -> bool:
    links = pd.read_parquet(out / schema.COMMUNICATION_LINKS)
    return set(links["rank_id"].astype(int)) == {1}


def _capture_rank(out: Path, rank: int) -> dict:
    return json.loads((out / schema.CAPTURE_INFO).read_text())["ranks"][rank]


def _comm_source(out: Path, rank: int) -> str:
    manifest = json.loads((out / schema.stage_manifest_name("summarize")).read_text())
    return next(m for m in manifest["rank_summaries"] if m["rank_id"] == rank)["communication_source"]


def _host_trace(out: Path, rank: int) -> str:
    manifest = json.loads((out / schema.stage_manifest_name("evidence")).read_text())
    return manifest["host_trace"]["by_rank"][str(rank)]["status"]


# file of rank 0 (relative to its rank dir) → (the base it is broken in, the fallback the analysis takes)
FILES = {
    "communication.json": (
        "clean",
        "ASCEND_PROFILER_OUTPUT/communication.json",
        lambda out: _comm_source(out, 0) == "events" and _comm_source(out, 1) == "communication_json",
    ),
    "communication_matrix.json": ("clean", "ASCEND_PROFILER_OUTPUT/communication_matrix.json", _rank0_links_missing),
    "profiler_metadata.json": (
        "clean",
        "profiler_metadata.json",
        lambda out: (
            _capture_rank(out, 0)["parallel_group_info"] is None and _capture_rank(out, 1)["parallel_group_info"]
        ),
    ),
    "profiler_info_0.json": (
        "clean",
        "profiler_info_0.json",
        lambda out: _capture_rank(out, 0)["profiler_level"] is None and _capture_rank(out, 1)["profiler_level"],
    ),
    # the host bubble sits on rank 0: its idle windows need the trace
    "trace_view.json": (
        "host_bubble",
        "ASCEND_PROFILER_OUTPUT/trace_view.json",
        lambda out: _host_trace(out, 0) == "unreadable" and _host_trace(out, 1) in ("ok", "no_bubbles"),
    ),
}
