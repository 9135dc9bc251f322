"""Content digests of the Parquet tables a stage writes, to prove a rewrite leaves them unchanged.

A digest hashes each rank's rows (values, column names and types, in row order) with pandas'
stable row hash, so the same table written by another library version still matches, while
one changed bit of one float does not. Columns that hold machine-local paths are left out.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from npuprof.pipeline.schema.table import Table
from npuprof.pipeline.stages import STAGES

LOCAL_COLUMNS = {"source_path"}  # absolute paths of the run's tmp dirs


def stage_tables(stage_names: tuple[str, ...]) -> list[Table]:
    """The Parquet tables the named stages produce, in registry order."""
    return [t for s in STAGES if s.name in stage_names for t in s.produces if isinstance(t, Table)]


def _frame_digest(frame: pd.DataFrame) -> str:
    frame = frame[[c for c in frame.columns if c not in LOCAL_COLUMNS]]
    header = "|".join(f"{c}:{frame[c].dtype}" for c in frame.columns).encode()
    rows = pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes() if len(frame) else b""
    return hashlib.sha256(header + rows).hexdigest()[:20]


def table_digests(out_dir: Path, stage_names: tuple[str, ...]) -> dict[str, str]:
    """{table or table/rank_id=r: digest} of every Parquet table the stages wrote into ``out_dir``."""
    digests = {}
    for table in stage_tables(stage_names):
        path = out_dir / table.path
        files = sorted(path.glob("rank_id=*/*.parquet")) if table.per_rank else [path]
        for file in files:
            key = f"{table.name}/{file.parent.name}" if table.per_rank else table.name
            digests[key] = _frame_digest(pq.read_table(file).to_pandas())
    return digests
