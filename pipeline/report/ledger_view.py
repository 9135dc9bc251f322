"""The step ledger in words: per rank, the lines that cost the most per step, each with what explains
it and what fixing it gives (report.md's first section, the terminal summary)."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.diagnosis.ledger import EXPECTED, UNEXPLAINED, unexplained_share

TOP_LINES = 5
MAX_RANKS = 8  # ranks spelled out (the most unexplained first); ledger.csv holds every one


def rank_ledgers(ledger: pd.DataFrame, findings: list[dict]) -> list[dict]:
    """Per rank (the most unexplained first, at most MAX_RANKS): its mean step wall over complete
    steps, its unexplained share and its TOP_LINES costliest lines (ms per step, share, explanation)."""
    complete = ledger[ledger["complete"].astype(bool)] if len(ledger) else ledger
    if not len(complete):
        return []
    saved = {f["claim_id"]: f for f in findings}
    steps = complete.groupby("rank_id")["step_ordinal"].nunique()
    walls = complete.drop_duplicates(["rank_id", "step_ordinal"]).groupby("rank_id")["wall_ms"].mean()
    lines = complete.groupby(["rank_id", "line", "explained_by"], as_index=False, dropna=False)["ms"].sum()
    lines["ms"] = lines["ms"] / lines["rank_id"].map(steps)
    shares = unexplained_share(ledger)
    ranks = sorted(walls.index, key=lambda r: (-float(shares.get(r, 0.0)), int(r)))[:MAX_RANKS]
    out = []
    for rank in ranks:
        mine = lines[lines["rank_id"] == rank].sort_values("ms", ascending=False).head(TOP_LINES)
        out.append(
            {
                "rank_id": int(rank),
                "wall_ms": float(walls[rank]),
                "unexplained_share": float(shares.get(rank, 0.0)),
                "lines": [
                    {
                        "line": row.line,
                        "ms_per_step": float(row.ms),
                        "share": float(row.ms / walls[rank]) if walls[rank] else 0.0,
                        "explained_by": _explanation(str(row.explained_by), saved),
                    }
                    for row in mine.itertuples()  # a loop over TOP_LINES rows
                ],
            }
        )
    return out


def _explanation(explained_by: str, findings: dict[str, dict]) -> str:
    """'slow_rank_suspected on rank 2 (recovers 3.9 ms/step)', 'expected: the step's compute', 'unexplained'."""
    if explained_by == UNEXPLAINED:
        return UNEXPLAINED
    if explained_by.startswith(EXPECTED):
        return "expected: " + explained_by.removeprefix(EXPECTED)
    finding = findings.get(explained_by)
    if finding is None:
        return explained_by
    ranks = finding["rank_ids"]
    where = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    saved = finding.get("recoverable_ms_per_step")
    gain = f", recovers {saved:.3g} ms/step" if saved is not None else ""
    return f"{finding['finding_type']} on {where}{gain}"
