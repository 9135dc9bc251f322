"""The diagnostics stage, in one package: its declaration (``STAGE``), its code (``stage.py``), the
detectors (``detectors/``, found by ``registry.py``; each reads its rules and note from
``knowledge/``), what they share (``context.py``, ``findings.py``, ``groups.py``, ``outliers.py``,
``retiming.py``, ``streams.py``, ``step_tags.py``, ``step_scale.py``, ``rank_kernels.py``), the step
ledger (``ledger.py``), the critical path, the slow rank's diff and the check that every finding cites
evidence that exists (``cited_evidence.py``). Its tables are declared in ``schema/diagnostics.py``."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.stages.base import Stage
from npuprof.pipeline.stages.diagnostics import stage

STAGE = Stage(
    name="diagnostics",
    requires=(
        schema.stage_manifest_name("cross_rank"),
        schema.COLLECTIVE_ALIGNMENT,
        schema.CROSS_RANK_ALIGNMENT,
        schema.EVIDENCE_INDEX,
    ),
    produces=(
        schema.DIAGNOSIS_FINDINGS,
        schema.STEP_ANOMALIES_CSV,
        schema.SLOW_RANK_DIFF_CSV,
        schema.STEP_LEDGER,
        schema.STEP_LEDGER_CSV,
        schema.CRITICAL_PATH,
        schema.CRITICAL_PATH_CSV,
    ),
    reduce_root=stage.reduce_root,
    headline=stage.headline,
)
