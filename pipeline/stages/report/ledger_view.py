"""The step ledger in words: per rank, the lines that cost the most per step, each with what explains
it and what fixing it gives (report.md's first section, the terminal summary); and as a bar per rank
(report.html), every line a segment."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.stages.diagnostics.ledger import CAUSE, EXPECTED, UNEXPLAINED, collective_words, unexplained_share

TOP_LINES = 5
MAX_RANKS = 8  # ranks spelled out (the most unexplained first); ledger.csv holds every one


def _per_rank(ledger: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series, pd.Series, list] | None:
    """Over complete steps: each rank's lines (rank_id, line, explained_by, ms per step), mean wall and
    unexplained share, and the ranks to show (the MAX_RANKS most unexplained, in rank order); None
    without a complete step."""
    complete = ledger[ledger["complete"].astype(bool)] if len(ledger) else ledger
    if not len(complete):
        return None
    steps = complete.groupby("rank_id")["step_ordinal"].nunique()
    walls = complete.drop_duplicates(["rank_id", "step_ordinal"]).groupby("rank_id")["wall_ms"].mean()
    lines = complete.groupby(["rank_id", "line", "explained_by"], as_index=False, dropna=False)["ms"].sum()
    lines["ms"] = lines["ms"] / lines["rank_id"].map(steps)
    shares = unexplained_share(ledger)
    chosen = sorted(walls.index, key=lambda r: (-float(shares.get(r, 0.0)), int(r)))[:MAX_RANKS]
    return lines, walls, shares, sorted(chosen, key=int)


def rank_ledgers(ledger: pd.DataFrame, findings: list[dict]) -> list[dict]:
    """Per rank (the MAX_RANKS most unexplained, in rank order): its mean step wall over complete steps,
    its unexplained share, its TOP_LINES costliest lines (ms per step, share, explanation) and how many
    lines and ms per step the rest hold (``more_lines``, ``more_ms``)."""
    per_rank = _per_rank(ledger)
    if per_rank is None:
        return []
    lines, walls, shares, ranks = per_rank
    saved = {f["claim_id"]: f for f in findings}
    out = []
    for rank in ranks:
        ranked = lines[lines["rank_id"] == rank].sort_values("ms", ascending=False)
        mine, rest = ranked.head(TOP_LINES), ranked.iloc[TOP_LINES:]
        out.append(
            {
                "rank_id": int(rank),
                "wall_ms": float(walls[rank]),
                "unexplained_share": float(shares.get(rank, 0.0)),
                "lines": [
                    {
                        "line": line_words(row.line),
                        "ms_per_step": float(row.ms),
                        "share": float(row.ms / walls[rank]) if walls[rank] else 0.0,
                        "explained_by": _explanation(str(row.explained_by), saved),
                    }
                    for row in mine.itertuples()  # a loop over TOP_LINES rows
                ],
                "more_lines": len(rest),
                "more_ms": float(rest["ms"].sum()),
            }
        )
    return out


COMMUNICATION = "communication "


def line_words(line: str) -> str:
    """A ledger line as people read it: "communication allreduce idle (group unknown)", not
    "communication unknown allreduce idle" (step_ledger.csv keeps the line as the rules match it)."""
    if line.startswith(COMMUNICATION):
        return COMMUNICATION + collective_words(line.removeprefix(COMMUNICATION))
    return line


def _explanation(explained_by: str, findings: dict[str, dict]) -> str:
    """'recovered by fixing slow_rank_suspected on rank 2', 'cause: capture_incomplete_group on ranks 0, 1
    (not recoverable from this capture)', 'expected: the step's compute', 'unexplained'."""
    if explained_by == UNEXPLAINED:
        return UNEXPLAINED
    if explained_by.startswith(EXPECTED):
        return "expected: " + explained_by.removeprefix(EXPECTED)
    cause = explained_by.startswith(CAUSE)
    finding = findings.get(explained_by.removeprefix(CAUSE))
    if finding is None:
        return explained_by
    ranks = finding["rank_ids"]
    where = f"{finding['finding_type']} on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    return f"cause: {where} (not recoverable from this capture)" if cause else f"recovered by fixing {where}"


MIN_SEGMENT_SHARE = 0.005  # lines below this share of the step are one "other lines" segment of the bar


def ledger_bars(ledger: pd.DataFrame, findings: list[dict]) -> list[dict]:
    """Per rank (as ``rank_ledgers`` orders and caps them): every line of its mean complete step as a
    segment of a bar (line, ms per step, share, what explains it and whether that is a finding, an
    expected reason or nothing), largest first; lines under MIN_SEGMENT_SHARE of the step merged."""
    per_rank = _per_rank(ledger)
    if per_rank is None:
        return []
    lines, walls, shares, ranks = per_rank
    saved = {f["claim_id"]: f for f in findings}
    return [
        {
            "rank_id": int(rank),
            "wall_ms": float(walls[rank]),
            "unexplained_share": float(shares.get(rank, 0.0)),
            "segments": _segments(lines[lines["rank_id"] == rank], float(walls[rank]) or 1.0, saved),
        }
        for rank in ranks  # at most MAX_RANKS
    ]


def _segments(lines: pd.DataFrame, wall: float, findings: dict[str, dict]) -> list[dict]:
    """One rank's lines (ms per step) as bar segments, largest first, the small ones merged."""
    lines = lines.sort_values("ms", ascending=False)
    small = lines["ms"] < MIN_SEGMENT_SHARE * wall
    segments = [
        {
            "line": line_words(row.line),
            "ms_per_step": float(row.ms),
            "share": float(row.ms) / wall,
            "explained_by": _explanation(str(row.explained_by), findings),
            "kind": _kind(str(row.explained_by)),
        }
        for row in lines[~small].itertuples()  # a loop over the rank's lines (tens)
    ]
    if small.any():
        rest = float(lines.loc[small, "ms"].sum())
        segments.append(
            {
                "line": f"{int(small.sum())} other lines",
                "ms_per_step": rest,
                "share": rest / wall,
                "explained_by": "each below half a percent of the step: step_ledger.csv",
                "kind": "other",
            }
        )
    return segments


def _kind(explained_by: str) -> str:
    """finding | cause | expected | unexplained: how a line is explained, for its colour."""
    if explained_by == UNEXPLAINED:
        return "unexplained"
    if explained_by.startswith(CAUSE):
        return "cause"
    return "expected" if explained_by.startswith(EXPECTED) else "finding"
