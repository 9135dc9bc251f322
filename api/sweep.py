"""``Sweep(archive)``: a merged sweep archive's tables as DataFrames, and SQL over them, for notebooks."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from npuprof.api.analysis import Analysis
from npuprof.pipeline import schema
from npuprof.pipeline.sweep.datasets import DATASETS, read_dataset
from npuprof.pipeline.sweep.sql_query import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, query


class Sweep:
    """Read-only view of one sweep archive (``npuprof sweep -o ARCHIVE`` or a service sweep's archive).

    Every table is one of ``Sweep.DATASETS`` (``ARCHIVE/sweep_data/<name>.parquet``), each row tagged
    with its root's ``slug``; ``analysis(slug)`` opens one root's own outputs.
    """

    DATASETS = DATASETS

    def __init__(self, archive: str | Path) -> None:
        self.archive = Path(archive)
        if not (self.archive / schema.SWEEP_DATA_DIR).is_dir():
            raise FileNotFoundError(f"{self.archive} is not a merged sweep archive ({schema.SWEEP_DATA_DIR}/ missing)")

    def table(self, name: str) -> pd.DataFrame:
        """One dataset by name (see ``DATASETS`` for what a row is)."""
        return read_dataset(self.archive, name)

    def roots(self) -> pd.DataFrame:
        """One row per root: the rollup (sweep_class_rollup.csv) with cohort and outlier columns."""
        return self.table("roots")

    def cohorts(self) -> pd.DataFrame:
        """One row per cohort: its key (model × parallel layout × software × hardware) and baseline."""
        return self.table("cohorts")

    def outliers(self) -> pd.DataFrame:
        """One row per outlying metric of a root: robust z against its cohort, and what moved."""
        return self.table("outliers")

    def fleet_suspects(self) -> pd.DataFrame:
        """The cards (host × device) findings name again and again, with the roots and finding ids."""
        return self.table("fleet_suspects")

    def fleet_link_suspects(self) -> pd.DataFrame:
        """The links (hosts, cards, transport) slow against their comparable links capture after capture."""
        return self.table("fleet_link_suspects")

    def trends(self) -> pd.DataFrame:
        """The change points of each cohort's series (step wall and its top classes)."""
        return self.table("trends")

    def query(
        self, sql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB
    ) -> pd.DataFrame:
        """DuckDB SQL over the datasets, each a view of its name (``SELECT * FROM roots``): queries only,
        reading the datasets only, within ``timeout_s`` seconds and ``memory_mb`` MB (a UsageError past
        either)."""
        return query(self.archive, sql, timeout_s=timeout_s, memory_mb=memory_mb)

    def analysis(self, root: str) -> Analysis:
        """The outputs of one root of the sweep: by its slug (the ``slug`` column of every table), its
        path, or its directory's name when no other root of the sweep shares it (as ``fetch --root``)."""
        if Path(root).name == root and not root.startswith(".") and (self.archive / root).is_dir():
            return Analysis(self.archive / root)
        roots = self.roots()[["root", "slug"]]
        matches = roots[(roots["root"] == root) | (roots["root"].map(lambda p: Path(p).name) == root)]
        if len(matches) == 1:
            return Analysis(self.archive / matches["slug"].iloc[0])
        if len(matches) > 1:  # a dir name several roots share: opening one of them would be a guess
            slugs = ", ".join(matches["slug"])
            raise ValueError(f"{root!r} names {len(matches)} roots of this sweep ({slugs}): pass a slug")
        some = ", ".join(roots["slug"].head(10)) + (", …" if len(roots) > 10 else "")
        raise ValueError(f"{root!r} is not a root of this sweep; its roots: {some or 'none'}")
