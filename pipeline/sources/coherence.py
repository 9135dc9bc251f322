"""Is a root one capture? Its ranks must have started together, run one software stack and been
exported alike; otherwise they are unrelated captures that happen to share a folder.

Read from normalize's per-rank summaries (first device event, kernel header width) and the capture
facts (versions, where each rank id came from); thresholds in ``knowledge/capture_rules.yaml``.
"""

from __future__ import annotations

from pathlib import Path

from npuprof import knowledge
from npuprof.pipeline.errors import BadInput


def _spread_s(rank_summaries: list[dict]) -> tuple[float, dict, dict] | None:
    """(seconds between the first and last rank start, the earliest rank, the latest) over ranks with events;
    a rank starts where its main stretch does (``body_start_ns``: a few far-off rows do not date it)."""
    started = [
        {**m, "start_ns": m.get("body_start_ns", m.get("start_ns"))}
        for m in rank_summaries
        if m.get("event_count") and m.get("start_ns") is not None
    ]
    if len(started) < 2:
        return None
    first = min(started, key=lambda m: m["start_ns"])
    last = max(started, key=lambda m: m["start_ns"])
    return (last["start_ns"] - first["start_ns"]) / 1e9, first, last


def _disagreements(rank_summaries: list[dict], capture: dict) -> list[str]:
    """Each way the ranks are not one capture, in words with the ranks and values."""
    rules = knowledge.load("capture_rules")
    found = []
    spread = _spread_s(rank_summaries)
    if spread is not None and spread[0] > rules["max_rank_start_spread_s"]:
        seconds, first, last = spread
        found.append(
            f"rank {first['rank_id']} starts {_duration(seconds)} before rank {last['rank_id']} "
            f"(one capture's ranks start within {rules['max_rank_start_spread_s']} s)"
        )
    widths = {}
    for m in rank_summaries:
        if m.get("header_columns") and m.get("source_kind"):
            widths.setdefault(m["source_kind"], {}).setdefault(m["header_columns"], []).append(m["rank_id"])
    for kind, by_width in sorted(widths.items()):
        if len(by_width) > 1:
            parts = "; ".join(f"{w} on {_ranks(r)}" for w, r in sorted(by_width.items()))
            found.append(f"their {kind} files have different columns ({parts})")
    ranks = capture.get("ranks") or []
    for key in rules["same_on_every_rank"]:
        values: dict[str, list[int]] = {}
        for rank in ranks:
            if rank.get(key) is not None:
                values.setdefault(str(rank[key]), []).append(rank["rank_id"])
        if len(values) > 1:
            found.append(f"{key} differs ({'; '.join(f'{v} on {_ranks(r)}' for v, r in sorted(values.items()))})")
    return found


def check_one_capture(root: str | Path, rank_summaries: list[dict], capture: dict) -> None:
    """Raise BadInput naming the evidence when the ranks under ``root`` are not one capture."""
    found = _disagreements(rank_summaries, capture)
    if not found:
        return
    ordinal = [r["rank_id"] for r in capture.get("ranks") or [] if r.get("rank_id_from") == "ordinal"]
    order = f"; the ids of {_ranks(ordinal)} come only from the order the dirs were found" if ordinal else ""
    raise BadInput(
        root,
        f"not one capture: {'; '.join(found)}{order}. Analyze each rank dir as its own root "
        "(npuprof sweep --search-root finds them)",
    )


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in sorted(ranks))


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:,.0f} s"
