"""What the last merge of an archive read, so that the next one reads only the roots that changed.

A merge records, per finished root it took, the stamp of the two files that root's rows come from —
its manifest and its cached rows (``rollup.root_entry``), each by size and modification time in ns —
in ``sweep_data/merge_state.parquet``, written after the datasets it describes. The next merge takes
every root whose stamp is unchanged from those datasets (one columnar read per table) and reads the
cache of new and re-analyzed roots only: adding ten roots to a ten-thousand-root archive reads ten
small files, not ten thousand. The derived tables (cohorts, outliers, fleet suspects, trends) are
computed over every root each time: a new root moves its cohort's baseline.

The state names the layout of the rows it vouches for (``TABLE_COLUMNS``, the rollup's columns): a
merge by a version that keeps other columns starts from the roots' caches again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd
import pyarrow as pa

from npuprof.pipeline import io, schema
from npuprof.pipeline.sweep.datasets import dataset_path
from npuprof.pipeline.sweep.root_tables import TABLE_COLUMNS

STATE_FILE = "merge_state.parquet"


def layout_key(rollup_columns: list[str]) -> str:
    """A short hash of the columns the datasets hold: rows written under another layout are not reused."""
    text = json.dumps({"tables": TABLE_COLUMNS, "rollup": rollup_columns}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def root_stamp(out_dir: Path) -> str | None:
    """Size and mtime (ns) of a root's manifest and cached rows; None when either is missing."""
    try:
        stats = [(out_dir / name).stat() for name in (schema.TOP_MANIFEST, schema.ROLLUP_ROW_CACHE)]
    except OSError:
        return None
    return ";".join(f"{s.st_size}:{s.st_mtime_ns}" for s in stats)


def state_path(archive: Path) -> Path:
    return Path(archive) / schema.SWEEP_DATA_DIR / STATE_FILE


@dataclass
class PreviousMerge:
    """The rows of the roots the last merge took whose files have not changed since."""

    rollup: pd.DataFrame = field(default_factory=pd.DataFrame)  # rollup rows (no cohort columns)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # each sweep table's rows of those roots

    @cached_property
    def slugs(self) -> set[str]:
        """The reused roots (a set built once: the merge asks it of every root)."""
        return set(self.rollup["slug"]) if len(self.rollup) else set()


def previous_merge(archive: Path, roots: list[tuple[str, str]], layout: str, columns: list[str]) -> PreviousMerge:
    """The reusable rows for ``roots`` [(root, slug)]: those of every root the last merge took with the
    same root path and the same stamp as now. Nothing when there is no state, another layout, or a
    dataset the state vouches for is missing or unreadable (the merge then reads every cache)."""
    path = state_path(archive)
    if not path.exists():
        return PreviousMerge()
    try:
        state = pd.read_parquet(path)
        if state.empty or set(state["layout"]) != {layout}:
            return PreviousMerge()
        now = pd.DataFrame(roots, columns=["root", "slug"])
        now["stamp"] = [root_stamp(Path(archive) / slug) for slug in now["slug"]]
        same = now.merge(state[["root", "slug", "stamp"]], on=["root", "slug", "stamp"])
        keep = set(same["slug"].dropna())
        if not keep:
            return PreviousMerge()
        rollup = pd.read_parquet(dataset_path(archive, "roots"), columns=columns)
        tables = {
            name: pd.read_parquet(dataset_path(archive, name), columns=["slug", *table_columns])
            for name, table_columns in TABLE_COLUMNS.items()
        }
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return PreviousMerge()
    return PreviousMerge(
        rollup[rollup["slug"].isin(keep)].reset_index(drop=True),
        {name: frame[frame["slug"].isin(keep)].reset_index(drop=True) for name, frame in tables.items()},
    )


def write_state(archive: Path, rollup: pd.DataFrame, layout: str) -> None:
    """Record the stamps of the finished roots just merged (after their datasets are written)."""
    finished = rollup[rollup["status"] == "ok"][["root", "slug"]].reset_index(drop=True)
    finished["stamp"] = [root_stamp(Path(archive) / slug) for slug in finished["slug"]]
    finished["layout"] = layout
    table = pa.Table.from_pandas(finished.dropna(subset=["stamp"]), preserve_index=False)
    io.write_parquet(state_path(archive), table)


def forget_state(archive: Path) -> None:
    """No state: the next merge reads every root's cache (after a merge whose datasets did not land)."""
    state_path(archive).unlink(missing_ok=True)
