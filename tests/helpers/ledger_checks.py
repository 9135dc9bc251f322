"""The step ledger's invariant, checked by the ledger's tests and those of what feeds it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from npuprof.api import Analysis
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.ledger import CAUSE, UNEXPLAINED

RESIDUAL_SHARE_MAX = 0.005  # the "not accounted" line's share of its step's wall, at most


def assert_ledger_adds_up(out: Path) -> pd.DataFrame:
    """The ledger of ``out``: every step of every rank in it, its lines summing to the wall (±0.1 %) with
    at most ``RESIDUAL_SHARE_MAX`` of it in the "not accounted" line (the ledger makes that line of
    whatever its lines miss, so summing to the wall alone cannot fail: a line dropped would move there),
    every line explained by a finding of this root (what its fix recovers, or ``cause:`` what it causes
    and the capture cannot recover), an expected reason or unexplained."""
    ledger = Analysis(out).ledger()
    steps = pd.read_csv(out / schema.STEP_SUMMARY.file)
    keys = ["rank_id", "step_ordinal"]
    assert sorted(map(tuple, ledger[keys].drop_duplicates().to_numpy())) == sorted(map(tuple, steps[keys].to_numpy()))
    total = ledger.groupby(keys)["ms"].sum()
    wall = steps.set_index(keys)["wall_ms"].reindex(total.index)
    assert ((total - wall).abs() <= 0.001 * wall + 1e-6).all(), (total - wall).abs().max()
    assert (ledger["ms"] > 0).all() or (ledger.loc[ledger["ms"] <= 0, "line"] == "not accounted").all()
    residual = ledger[ledger["category"] == "residual"].set_index(keys)["ms"].abs()
    assert (residual <= RESIDUAL_SHARE_MAX * wall.reindex(residual.index)).all(), residual.max()
    claims = {f["claim_id"] for f in json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]}
    reasons = ledger["explained_by"]
    causes = reasons.str.startswith(CAUSE)
    assert (
        reasons.isin(claims)
        | reasons.str.removeprefix(CAUSE).isin(claims)[causes].reindex(reasons.index, fill_value=False)
        | reasons.str.startswith("expected:")
        | (reasons == UNEXPLAINED)
    ).all()
    assert ledger.loc[reasons.isin(claims) | causes, "finding_type"].notna().all()
    return ledger
