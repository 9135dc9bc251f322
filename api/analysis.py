"""``Analysis(out_dir)``: the outputs of one analyzed root as DataFrames, for notebooks."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.stages.base import read_dataset


class Analysis:
    """Read-only view of one ``npuprof analyze`` output directory."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        if not (self.out_dir / schema.stage_manifest_name("normalize")).exists():
            raise FileNotFoundError(f"{self.out_dir} holds no completed npuprof analysis (normalize_manifest.json missing)")

    def events(self, rank_id: int | None = None) -> pd.DataFrame:
        """Normalized device events: one row per kernel / communication op.

        Columns (see ``npuprof.pipeline.schema.EVENT_SCHEMA``): rank_id, source_id and row_idx (the
        evidence anchor back to the source file's data row), step_id, name, type,
        accelerator_core, op_type, start_ns / end_ns / duration_ns / wait_ns (int64 ns), block
        dims, shapes, dtypes, formats, the 11 pipeline fields in µs (null when not captured),
        categories, roles.
        """
        table = read_dataset(self.out_dir, schema.NORMALIZED_EVENTS, rank_id)
        frame = table.to_pandas()
        if rank_id is not None:
            frame.insert(0, "rank_id", rank_id)
        return frame

    def manifest(self, stage: str | None = None) -> dict:
        """The top-level manifest, or one stage's manifest."""
        name = schema.TOP_MANIFEST if stage is None else schema.stage_manifest_name(stage)
        return json.loads((self.out_dir / name).read_text(encoding="utf-8"))

    def capture_info(self) -> dict:
        """How each rank was captured (profiler level, metrics, versions, parallel groups)."""
        return json.loads((self.out_dir / schema.CAPTURE_INFO).read_text(encoding="utf-8"))
