"""A rewrite must not change what the stages write unnoticed: every table of segment … diagnostics (the ledger
and critical path included) and the answers themselves (diagnosis_findings.json, analysis_summary.json's KPIs
and findings) on every synth scenario and on the real samples hash to the digests recorded.

Correctness lives in the ground-truth tests; this one pins the bytes. After an intended change of output,
rerun with ``NPUPROF_WRITE_DIGESTS=1`` and ``NPUPROF_DIGEST_REASON="why these tables changed"``: only the
tables that changed are rewritten, each with that reason beside its digest, so a review of
tests/data/table_digests.json sees which tables moved and why (a rewrite without a reason is refused).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from table_digest import answer_digests, table_digests

from npuprof.synth import SCENARIOS

pytestmark = pytest.mark.xdist_group("planted")  # one worker: shares planted_outputs

DIGESTS = Path(__file__).parent / "data" / "table_digests.json"
STAGES = ("segment", "classify", "summarize", "evidence", "model", "cross_rank", "diagnostics")
REASON_MIN_CHARS = 20  # a reason says what changed and why, not "update"
SAMPLES = ("qwen3_training", "text_level2", "db_level2")


def _check(case: str, out: Path) -> None:
    found = {**table_digests(out, STAGES), **answer_digests(out)}
    recorded = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}
    mine = recorded.get(case, {})
    changed = sorted(k for k in found.keys() | mine.keys() if found.get(k) != mine.get(k, {}).get("digest"))
    if os.environ.get("NPUPROF_WRITE_DIGESTS"):
        reason = os.environ.get("NPUPROF_DIGEST_REASON", "").strip()
        assert len(reason) >= REASON_MIN_CHARS, "NPUPROF_DIGEST_REASON must say why the tables changed"
        kept = {k: v for k, v in mine.items() if k in found and k not in changed}
        recorded[case] = {**kept, **{k: {"digest": found[k], "why": reason} for k in changed if k in found}}
        DIGESTS.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        return
    assert case in recorded, f"no recorded digests for {case}: run once with NPUPROF_WRITE_DIGESTS=1"
    assert not changed, f"{case}: tables changed: {changed[:8]}"


def test_every_recorded_digest_says_why_it_was_last_rewritten():
    """Each table's digest carries the reason of its last rewrite (NPUPROF_DIGEST_REASON)."""
    recorded = json.loads(DIGESTS.read_text())
    short = [(case, table) for case, tables in recorded.items() for table, entry in tables.items()
             if len(entry.get("why", "").strip()) < REASON_MIN_CHARS]  # fmt: skip
    assert not short and len(recorded) >= 40, short[:5]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_synth_tables_are_unchanged(planted_outputs, name):
    _check(f"synth:{name}", planted_outputs[name][1])


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_tables_are_unchanged(sample_outputs, name):
    _check(f"sample:{name}", sample_outputs[name][0])
