"""A speed rewrite must not change what segment, classify, summarize, evidence and model write: their tables on
every synth scenario and on the real samples hash to the digests recorded before the rewrite.

Correctness lives in the ground-truth tests; this one pins the bytes. After an intended change
of output, rerun with ``NPUPROF_WRITE_DIGESTS=1`` and commit the new tests/data/table_digests.json
together with the change that explains it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from table_digest import table_digests

from npuprof.synth import SCENARIOS

pytestmark = pytest.mark.xdist_group("planted")  # one worker: shares planted_outputs

DIGESTS = Path(__file__).parent / "data" / "table_digests.json"
STAGES = ("segment", "classify", "summarize", "evidence", "model")
SAMPLES = ("qwen3_training", "text_level2", "db_level2")


def _check(case: str, out: Path) -> None:
    found = table_digests(out, STAGES)
    recorded = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}
    if os.environ.get("NPUPROF_WRITE_DIGESTS"):
        recorded[case] = found
        DIGESTS.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        return
    assert case in recorded, f"no recorded digests for {case}: run once with NPUPROF_WRITE_DIGESTS=1"
    changed = sorted(k for k in found.keys() | recorded[case].keys() if found.get(k) != recorded[case].get(k))
    assert not changed, f"{case}: tables changed: {changed[:8]}"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_synth_tables_are_unchanged(planted_outputs, name):
    _check(f"synth:{name}", planted_outputs[name][1])


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_tables_are_unchanged(sample_outputs, name):
    _check(f"sample:{name}", sample_outputs[name][0])
