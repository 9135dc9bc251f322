"""Content digests of the Parquet tables a stage writes, to prove a rewrite leaves them unchanged.

A digest hashes each rank's rows (values, column names and types, in row order) with pandas'
stable row hash, so the same table written by another library version still matches, while
one changed bit of one float does not. Columns that hold machine-local paths are left out.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from npuprof.pipeline import io
from npuprof.pipeline.schema.table import Table
from npuprof.pipeline.stages import STAGES

LOCAL_COLUMNS = {"source_path"}  # absolute paths of the run's tmp dirs


def stage_tables(stage_names: tuple[str, ...]) -> list[Table]:
    """The Parquet tables the named stages produce, in registry order."""
    return [t for s in STAGES if s.name in stage_names for t in s.produces if isinstance(t, Table)]


def _optional_tables(out_dir: Path, stage_names: tuple[str, ...]) -> list[Table]:
    """The Parquet tables the named stages write under some captures or options only, that they wrote."""
    optional = [t for s in STAGES if s.name in stage_names for t in s.optional if isinstance(t, Table)]
    return [t for t in optional if (out_dir / t.path).exists()]


def _frame_digest(frame: pd.DataFrame) -> str:
    frame = frame[[c for c in frame.columns if c not in LOCAL_COLUMNS]]
    header = "|".join(f"{c}:{frame[c].dtype}" for c in frame.columns).encode()
    rows = pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes() if len(frame) else b""
    return hashlib.sha256(header + rows).hexdigest()[:20]


def table_digests(out_dir: Path, stage_names: tuple[str, ...]) -> dict[str, str]:
    """{table or table/rank_id=r: digest} of every Parquet table the stages wrote into ``out_dir`` (an
    optional one, such as an inference capture's forward_summary, where it was written); a
    per-rank table has a digest for every rank any of the tables has a partition of, its rows as
    ``io.read_dataset`` reads them (a rank without device events writes no empty partitions: it reads
    as the empty table a written one held)."""
    tables = stage_tables(stage_names) + _optional_tables(out_dir, stage_names)
    ranks = sorted({r for t in tables if t.per_rank for r in io.partition_ranks(out_dir, t)})
    digests = {}
    for table in tables:
        if not table.per_rank:
            digests[table.name] = _frame_digest(pq.read_table(out_dir / table.path).to_pandas())
            continue
        for rank in ranks:
            rows = io.read_dataset(out_dir, table, rank).to_pandas()
            digests[f"{table.name}/rank_id={rank}"] = _frame_digest(rows)
    return digests


# what a finding and the summary say, without what varies from run to run (times of day, tool version,
# the run's own paths and stage timings)
VOLATILE_KEYS = {"created_at", "generated_at", "tool_version", "stage_timings", "profile_root", "source_path"}


def _canonical(value: object) -> object:
    """``value`` with VOLATILE_KEYS dropped at every depth and floats rounded to 6 places."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in sorted(value.items()) if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return round(value, 6) if isinstance(value, float) else value


def answer_digests(out_dir: Path) -> dict[str, str]:
    """Digests of the answers themselves: diagnosis_findings.json (every finding, the joint saving,
    capture health) and, where the report ran, analysis_summary.json's KPIs, headline and findings."""
    documents = {"diagnosis_findings.json": out_dir / "diagnosis_findings.json"}
    summary = out_dir / "report" / "analysis_summary.json"
    if summary.is_file():
        documents["analysis_summary.json"] = summary
    digests = {}
    for name, path in documents.items():
        document = json.loads(path.read_text())
        if name == "analysis_summary.json":
            document = {k: document.get(k) for k in ("headline", "kpis", "findings", "recoverable_together")}
        text = json.dumps(_canonical(document), sort_keys=True, ensure_ascii=False).encode()
        digests[name] = hashlib.sha256(text).hexdigest()[:20]
    return digests
