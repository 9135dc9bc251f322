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


# what ``query`` runs: statements that read (DESCRIBE and SUMMARIZE parse as SELECT)
QUERY_STATEMENTS = ("SELECT", "EXPLAIN")
# the names a person guesses first, beside the datasets' own (view -> {alias: column})
VIEW_ALIASES = {"roots": {"step_wall_ms": "top_step_class_wall_ms_mean"}}


def read_dataset(archive: Path, name: str) -> pd.DataFrame:
    """One dataset of a sweep archive as a DataFrame; a clear error when the archive has none."""
    if name not in DATASETS:
        raise UsageError(f"unknown sweep dataset {name!r}; known: {', '.join(DATASETS)}")
    path = dataset_path(archive, name)
    if not path.exists():
        raise UsageError(f"{archive} holds no sweep dataset {name} ({path} is missing: merge the sweep first)")
    return pd.read_parquet(path)


def _literal(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def query(archive: Path, sql: str) -> pd.DataFrame:
    """Run DuckDB ``sql`` — queries only (SELECT, WITH, DESCRIBE, SUMMARIZE, EXPLAIN) — over the
    archive's datasets, each a view named as its dataset (``roots``, ``operators``, ...).

    The SQL is untrusted (an agent's, a pasted one): it runs in an in-memory connection that may open
    files under the archive's sweep_data/ only (``allowed_directories``, then external access off), loads
    and installs no extension, and whose configuration is then locked; a statement that is not a query
    (COPY, ATTACH, INSTALL, SET, CREATE, DROP ...) is refused before anything runs."""
    import duckdb

    archive = Path(archive).resolve()  # the views' paths and the one allowed dir, spelled alike
    folder = archive / schema.SWEEP_DATA_DIR
    if not folder.is_dir():
        raise UsageError(f"{archive} is not a merged sweep archive ({schema.SWEEP_DATA_DIR}/ is missing)")
    if io.duckdb_globs(folder):  # it would read other files
        raise UsageError(f"{archive}: query cannot read an archive whose path holds any of * ? [ ] {{ }}: move it")
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise UsageError(f"query failed: {str(exc).splitlines()[0]}") from None
    refused = [s.type.name for s in statements if s.type.name not in QUERY_STATEMENTS]
    if refused or not statements:
        what = ", ".join(refused) or "nothing"
        raise UsageError(f"query refused: only queries run over a sweep archive ({what} is not a query)")
    with io.duckdb_connection() as con:
        for name in DATASETS:
            path = dataset_path(archive, name)
            if path.exists():  # the path is ours (archive/sweep_data/<known name>.parquet)
                source = f"read_parquet({_literal(str(path))})"
                present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
                aliases = "".join(
                    f", {column} AS {alias}"
                    for alias, column in VIEW_ALIASES.get(name, {}).items()
                    if column in present and alias not in present
                )
                con.execute(f"CREATE VIEW {name} AS SELECT *{aliases} FROM {source}")
        con.execute(f"SET allowed_directories = [{_literal(str(folder) + '/')}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        try:
            return con.execute(sql).df()
        except duckdb.Error as exc:
            hint = " (DESCRIBE <view> lists a view's columns)" if isinstance(exc, duckdb.BinderException) else ""
            raise UsageError(f"query failed: {str(exc).splitlines()[0]}{hint}") from None
