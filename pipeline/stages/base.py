"""What a stage is: functions over tables, with a context to read inputs and a result to write.

A stage never chooses a file format and never touches the CLI: it returns tables (keyed by their
declaration in ``npuprof.pipeline.schema``), CSV views, JSON documents and rendered artifacts, and
the runner writes them atomically, its manifest last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline import csv_formulas, io, schema
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.sources.discovery import RankInput, RootInputs


def conformed(table: schema.Table, frame: pd.DataFrame) -> pd.DataFrame:
    """A root-level table with exactly its declared columns (all of them, also when empty)."""
    return table.conform(frame).to_pandas()


@dataclass
class StageResult:
    """What a stage returns; the runner writes every part atomically and the manifest last.

    ``tables``: declared Parquet tables (DataFrame or Arrow), conformed to their declaration.
    ``csv_views``: user-facing CSVs. ``json_files``: JSON documents by artifact file name.
    ``rendered``: rendered artifacts (markdown, xlsx, html and its gz assets, trace.json) as bytes
    or text, by path relative to the output dir (``report/report.md``); a large one as an iterable
    of byte chunks, produced while it is written (one rank's worth in memory, not the root's).
    """

    tables: dict[schema.Table, pd.DataFrame | pa.Table] = field(default_factory=dict)
    csv_views: dict[schema.CsvView, pd.DataFrame] = field(default_factory=dict)
    json_files: dict[str, Any] = field(default_factory=dict)
    rendered: dict[str, bytes | str | Iterable[bytes]] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankContext:
    """Inputs of a rank-local (map) stage: one rank of one root.

    ``handed_over``: this rank's tables that earlier stages of the same run wrote, by table path, as they
    were written — a rank's stages run one after another in one process, so the next one takes them
    from memory instead of reading the file back. ``derived``: values an earlier stage of the chain
    computed from those tables and a later one uses (by name, see ``Stage.map_uses``); a stage that
    does not find one computes it.
    """

    out_dir: Path
    rank: RankInput
    options: AnalyzeOptions
    handed_over: dict[str, pa.Table] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict)

    def read_table(
        self, table: schema.Table, columns: list[str] | None = None, filter: pc.Expression | None = None
    ) -> pa.Table:
        """This rank's partition of ``table`` (only ``columns``, rows matching ``filter``)."""
        held = self.handed_over.get(table.path)
        # the chain keeps of a handed-over table only the columns its later stages declare they read
        wanted = table.columns if columns is None else columns
        if held is None or not set(wanted) <= set(held.column_names):
            return io.read_dataset(self.out_dir, table, self.rank.rank_id, columns=columns, filter=filter)
        if filter is not None:
            held = held.filter(filter)
        return held.select(list(columns)) if columns is not None else held


@dataclass
class RootContext:
    """Inputs of a cluster-level (reduce) stage: the whole root, and what its map step returned."""

    out_dir: Path
    inputs: RootInputs
    options: AnalyzeOptions
    rank_manifests: list[dict] = field(default_factory=list)

    def read_table(
        self,
        table: schema.Table,
        columns: list[str] | None = None,
        filter: pc.Expression | None = None,
        dictionary: tuple[str, ...] = (),
    ) -> pa.Table:
        """``table`` over all ranks, with an int32 ``rank_id`` column; ``dictionary`` text columns
        dictionary-encoded, as stored (``io.read_dataset``)."""
        return io.read_dataset(self.out_dir, table, columns=columns, filter=filter, dictionary=dictionary)

    def rank_frames(
        self,
        table: schema.Table,
        columns: list[str] | None = None,
        keep: Callable[[int, pa.Table], pa.ChunkedArray] | None = None,
    ) -> Iterator[pd.DataFrame]:
        """The per-rank ``table`` one rank at a time (rank order), each with its int32 ``rank_id``: a
        root-level stage streams the big tables of a root (events, idle windows), never holds them whole.
        ``keep(rank_id, part)``: the rows to keep, chosen on the Arrow table before any becomes pandas."""
        for rank_id in io.partition_ranks(self.out_dir, table):
            part = io.read_dataset(self.out_dir, table, rank_id, columns=columns)
            if keep is not None:
                part = part.filter(keep(rank_id, part))
            rank = pa.array([rank_id] * part.num_rows, pa.int32())
            yield part.append_column(schema.RANK_PARTITION_KEY, rank).to_pandas()

    def read_view(self, view: schema.CsvView) -> pd.DataFrame:
        """A root-level CSV an earlier reduce wrote (its declared columns, empty when it is missing)."""
        path = self.out_dir / view.file
        if not path.exists():
            return pd.DataFrame(columns=list(view.columns))
        return csv_formulas.read_csv_view(path)

    def read_frame(self, table: schema.Table) -> pd.DataFrame:
        """``table`` over all ranks (or the per-root table) as a DataFrame; empty when nothing wrote it."""
        if not (self.out_dir / table.path).exists():
            key = [schema.RANK_PARTITION_KEY] if table.per_rank else []
            return pd.DataFrame(columns=[*table.columns, *key])
        if not table.per_rank:
            return pd.read_parquet(self.out_dir / table.path)
        return self.read_table(table).to_pandas()


@dataclass(frozen=True)
class RankRead:
    """A rank table that a stage's map unit reads: every column (``columns`` None) or only these. A
    rank's chain holds a table an earlier stage handed over only while a later stage reads it, and
    only the columns it reads (a read of anything else goes to disk)."""

    table: schema.Table
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Stage:
    """A registered stage: its artifacts, its map (per rank) and reduce (per root) functions, and
    the headline it contributes to the result JSON."""

    name: str
    requires: tuple[schema.Table | schema.CsvView | str, ...] = ()  # must exist before it runs
    produces: tuple[schema.Table | schema.CsvView | str, ...] = ()  # owned: removed before a re-run
    # owned too, but written only under some options (removed before a re-run that may not write them)
    optional: tuple[schema.Table | schema.CsvView | str, ...] = ()
    map_rank: Callable[[RankContext], StageResult] | None = None
    map_reads: tuple[RankRead, ...] = ()  # what map_rank reads of the rank's tables
    map_uses: tuple[str, ...] = ()  # the chain's derived values map_rank takes or leaves (RankContext.derived)
    # map_rank for a rank without device events (communication files only): the same manifest, and the
    # rows its other files give, without the work over events (an empty table may be left out); a
    # thousand such ranks cost what one rank's events do. None: map_rank runs for it.
    map_eventless: Callable[[RankContext], StageResult] | None = None
    reduce_root: Callable[[RootContext], StageResult] | None = None
    # The stage's part of the result JSON, from its manifest: (headline dict, warnings).
    headline: Callable[[dict], tuple[dict, list[str]]] | None = None

    @property
    def owned_paths(self) -> tuple[str, ...]:
        """Every path (relative to the output dir) this stage may write: its declared artifacts."""
        return tuple(schema.as_path(a) for a in (*self.produces, *self.optional))

    def check_declared(self, result: "StageResult") -> None:
        """Refuse (an internal error) a result that holds an artifact the stage does not declare."""
        owned = self.owned_paths
        paths = [t.path for t in result.tables] + [v.file for v in result.csv_views]
        paths += [*result.json_files, *result.rendered]
        undeclared = [p for p in paths if not any(p == o or p.startswith(o + "/") for o in owned)]
        if undeclared:
            raise RuntimeError(f"stage {self.name} returned artifacts it does not declare: {', '.join(undeclared)}")

    def rank_tables(self) -> list[schema.Table]:
        """The per-rank tables this stage writes (a partition per rank)."""
        return [a for a in (*self.produces, *self.optional) if isinstance(a, schema.Table) and a.per_rank]

    @property
    def manifest_name(self) -> str:
        return schema.stage_manifest_name(self.name)
