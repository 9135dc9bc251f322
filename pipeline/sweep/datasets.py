"""The sweep as a dataset: one Parquet file per table under ``ARCHIVE/sweep_data/``, one row per root ×
thing (step class, operator, collective, finding, ...), each with the root's ``slug``. DuckDB, polars and
pandas read them directly; ``query`` runs DuckDB SQL over them with each table as a view of its name.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import UsageError

# dataset name -> what one row is
DATASETS = {
    "roots": "one analyzed root (the rollup row, with its cohort and outlier columns)",
    "ranks": "one rank of a root: the host and card it ran on, its step times",
    "step_class_stats": "one step class of a root",
    "layer_class_stats": "one layer class of a root",
    "block_class_stats": "one block class of a root",
    "operators": "one of a root's top operators, ms per step per rank",
    "collectives": "one collective kind × parallel role of a root, ms per step per rank",
    "time_split": "where a root's step time went (breakdown × category × component), ms per step",
    "findings": "one finding of a root",
    "cohorts": "one cohort: its key and step-wall baseline",
    "cohort_baselines": "one thing of a cohort (metric, class, operator, collective): median and robust spread",
    "outliers": "one outlying metric of a root, with what moved",
    "fleet_suspects": "one card that findings name again and again",
    "links": "one link of a root (global ranks, transport): its bandwidth against its comparable links",
    "fleet_link_suspects": "one link (hosts, cards, transport) slow against its peers capture after capture",
    "trends": "one change point in a cohort's series",
}


def sweep_files() -> list[str]:
    """What ``npuprof fetch SWEEP_ID`` copies of a sweep, relative to its archive: the rollup and summary,
    the cohort / outlier / fleet / trend tables, sweep_report.html and every dataset."""
    tables = [
        schema.SWEEP_COHORTS,
        schema.SWEEP_COHORT_BASELINES,
        schema.SWEEP_OUTLIERS,
        schema.FLEET_SUSPECTS,
        schema.FLEET_LINK_SUSPECTS,
        schema.SWEEP_TRENDS,
    ]
    datasets = [f"{schema.SWEEP_DATA_DIR}/{name}.parquet" for name in DATASETS]
    return [schema.SWEEP_ROLLUP, schema.SWEEP_SUMMARY, *tables, schema.SWEEP_REPORT_HTML, *datasets]


def dataset_path(archive: Path, name: str) -> Path:
    return Path(archive) / schema.SWEEP_DATA_DIR / f"{name}.parquet"


def write_datasets(archive: Path, frames: dict[str, pd.DataFrame]) -> list[str]:
    """Write each frame as ``sweep_data/<name>.parquet`` (atomically, one file each); returns the names."""
    for name, frame in frames.items():
        table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
        io.write_parquet(dataset_path(archive, name), table)
    return sorted(frames)


def read_dataset(archive: Path, name: str) -> pd.DataFrame:
    """One dataset of a sweep archive as a DataFrame; a clear error when the archive has none."""
    if name not in DATASETS:
        raise UsageError(f"unknown sweep dataset {name!r}; known: {', '.join(DATASETS)}")
    path = dataset_path(archive, name)
    if not path.exists():
        raise UsageError(f"{archive} holds no sweep dataset {name} ({path} is missing: merge the sweep first)")
    return pd.read_parquet(path)
