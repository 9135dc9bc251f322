"""What a stage is: functions over tables, with a context to read inputs and a result to write.

A stage never chooses a file format and never touches the CLI: it returns tables, and the runner
writes them (Parquet partitions, CSV views, JSON) atomically, its manifest last.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from npuprof.pipeline.sources.discovery import RankInput, RootInputs


@dataclass(frozen=True)
class AnalyzeOptions:
    """Options that change what the analysis computes (and so belong in task ids and manifests)."""

    mode: str = "fast"  # fast | full
    source: str = "auto"  # auto | csv | db
    hash_sources: bool = False
    model_config: str | None = None  # a HuggingFace-style config.json (num_hidden_layers, ...)
    model_id: str | None = None  # a key of knowledge/model_catalog.yaml

    _KEYS = ("mode", "source", "hash_sources", "model_config", "model_id")

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self._KEYS}

    @classmethod
    def from_dict(cls, data: dict) -> "AnalyzeOptions":
        return cls(**{k: data[k] for k in cls._KEYS if k in data})


@dataclass
class StageResult:
    """What a stage returns: Parquet tables, CSV views, JSON documents and its manifest."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    csv_views: dict[str, pd.DataFrame] = field(default_factory=dict)
    json_files: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)


def read_dataset(out_dir: Path, table: str, rank_id: int | None = None) -> pa.Table:
    """Read a per-rank Parquet table (all ranks, or one rank's partition) with an int rank_id column."""
    path = Path(out_dir) / table
    if rank_id is not None:
        path = path / f"rank_id={rank_id}"
        return ds.dataset(path, format="parquet").to_table()
    dataset = ds.dataset(path, format="parquet", partitioning="hive")
    result = dataset.to_table()
    return result.set_column(result.schema.get_field_index("rank_id"), "rank_id", result.column("rank_id").cast(pa.int32()))


@dataclass
class RankContext:
    """Inputs of a rank-local (map) stage: one rank of one root."""

    out_dir: Path
    rank: RankInput
    options: AnalyzeOptions

    def read_table(self, table: str) -> pa.Table:
        return read_dataset(self.out_dir, table, self.rank.rank_id)


@dataclass
class RootContext:
    """Inputs of a cluster-level (reduce) stage: the whole root, and what its map step returned."""

    out_dir: Path
    inputs: RootInputs
    options: AnalyzeOptions
    rank_manifests: list[dict] = field(default_factory=list)

    def read_table(self, table: str) -> pa.Table:
        return read_dataset(self.out_dir, table)


@dataclass(frozen=True)
class Stage:
    """A registered stage: its artifacts and its map (per rank) and reduce (per root) functions."""

    name: str
    requires: tuple[str, ...] = ()  # artifacts (relative paths) that must exist before it runs
    produces: tuple[str, ...] = ()  # artifacts it owns (removed before a re-run)
    map_rank: Callable[[RankContext], StageResult] | None = None
    reduce_root: Callable[[RootContext], StageResult] | None = None
    # Arrow-bound map steps (CSV parsing, casts, Parquet writes) release the GIL, so threads
    # parallelise them without a second copy of pandas/pyarrow per process; Python-bound
    # stages use a process pool.
    map_in_threads: bool = False

    @property
    def built(self) -> bool:
        return self.map_rank is not None or self.reduce_root is not None
