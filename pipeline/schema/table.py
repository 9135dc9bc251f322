"""What a declared table is: its name, where it lives in an output dir, its columns and their types.

Every table npuprof writes is declared once in a module of this package; stages, the runner, the
rollup, ``Analysis`` and the service take names, paths and columns from there. A stage hands the
runner DataFrames or Arrow tables keyed by their declaration, and ``conform`` gives each exactly
the declared columns, in order, with the declared types, so an empty rank writes the same schema
as a full one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

RANK_PARTITION_KEY = "rank_id"
PARTITION_FILE = "part-0.parquet"


@dataclass(frozen=True)
class Table:
    """A Parquet table: per rank (a hive dataset ``<name>/rank_id=<r>/part-0.parquet``) or per root
    (``<name>.parquet``). Usable as a path component: ``out_dir / STEP_SEGMENTS``."""

    name: str
    schema: pa.Schema
    per_rank: bool = True

    @property
    def path(self) -> str:
        """Path of the table inside an output dir (a directory for per-rank tables)."""
        return self.name if self.per_rank else f"{self.name}.parquet"

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.schema.names)

    def partition(self, rank_id: int) -> str:
        """Relative path of one rank's Parquet file."""
        return f"{self.name}/{RANK_PARTITION_KEY}={rank_id}/{PARTITION_FILE}"

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def conform(self, data: pd.DataFrame | pa.Table) -> pa.Table:
        """``data`` as an Arrow table with exactly the declared columns and types.

        Without rows, the declared empty table (an empty rank still writes every column); otherwise a
        missing or an undeclared column is a bug in the stage and refused, so a declaration never
        drifts from what is written.
        """
        if len(data) == 0:
            return self.schema.empty_table()
        names = list(data.schema.names if isinstance(data, pa.Table) else data.columns)
        missing = [c for c in self.columns if c not in names]
        extra = [c for c in names if c not in self.columns]
        if extra or missing:
            raise ValueError(f"table {self.name}: columns missing {missing}, undeclared {extra}")
        if isinstance(data, pa.Table):
            return data.select(list(self.columns)).cast(self.schema)
        # the schema alone picks and orders the columns: no copy of the frame to select them first
        return pa.Table.from_pandas(data, schema=self.schema, preserve_index=False)


@dataclass(frozen=True)
class CsvView:
    """A user-facing CSV: per-rank tables joined on ``keys`` and sorted by them (stable), or one
    per-root table as it is.

    Columns come from the tables in order; a column already given by an earlier table is not
    repeated (the earlier table holds its authoritative value).
    """

    file: str
    tables: tuple[Table, ...]
    keys: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        """The first table's columns, rank_id, then each later table's new columns."""
        seen: dict[str, None] = dict.fromkeys(self.tables[0].columns)
        if self.tables[0].per_rank:
            seen.setdefault(RANK_PARTITION_KEY, None)
        for table in self.tables[1:]:
            for column in table.columns:
                seen.setdefault(column, None)
        return tuple(seen)

    def __fspath__(self) -> str:
        return self.file

    def __str__(self) -> str:
        return self.file


def join_view(view: CsvView, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The view's rows: ``frames`` (one per table of the view, all ranks) joined on its keys."""
    joined = frames[0]
    for frame in frames[1:]:
        if joined.empty:
            break
        own = [c for c in frame.columns if c not in joined.columns or c in view.keys]
        joined = joined.merge(frame[own], on=[k for k in view.keys if k in frame.columns], how="left")
    if joined.empty:
        return pd.DataFrame(columns=list(view.columns))
    joined = joined[list(view.columns)]
    if view.keys:
        joined = joined.sort_values(list(view.keys), kind="stable")
    return joined.reset_index(drop=True)


# summarize's manifest is named after its tables (the output contract since the first release).
_MANIFEST_NAME_OVERRIDES = {"summarize": "summary_manifest.json"}


def stage_manifest_name(stage: str) -> str:
    """File name of the manifest that marks ``stage`` complete."""
    return _MANIFEST_NAME_OVERRIDES.get(stage, f"{stage}_manifest.json")


def as_path(item: Table | CsvView | str) -> str:
    """Relative path of a declared table, view or artifact file name."""
    return os.fspath(item)
