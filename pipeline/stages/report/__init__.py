"""The report stage, in one package: its declaration (``STAGE``), its code (``stage.py``) and the
renderers (markdown, xlsx, html, Perfetto trace): functions from tables to bytes. A renderer
receives the tables it renders and returns the artifact's bytes; it never opens a file. The stage
returns them in ``StageResult.rendered`` and the runner writes them atomically. Its files are named
in ``schema/artifacts.py``."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.stages.base import Stage
from npuprof.pipeline.stages.report import stage

STAGE = Stage(
    name="report",
    requires=(schema.stage_manifest_name("diagnostics"), schema.DIAGNOSIS_FINDINGS),
    produces=(schema.REPORT_DIR,),
    reduce_root=stage.reduce_root,
    headline=stage.headline,
)
