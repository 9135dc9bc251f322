"""``npuprof query``: untrusted DuckDB SQL (an agent's, a pasted one) over a sweep archive's datasets.

The SQL may read the archive's dataset files and nothing else, may write nothing, and is bounded in
time and memory. Each guard closes a way out that DuckDB leaves open by default:

- Only a SELECT runs (DESCRIBE, SUMMARIZE, SHOW and FROM-first parse as one); EXPLAIN only of a
  SELECT, since ``EXPLAIN ANALYZE`` executes what it explains (a COPY included).
- The files it may open are the datasets themselves (``allowed_paths``, each resolved and checked to
  be a regular file inside the archive's own ``sweep_data/``, not a link): a ``sweep_data`` that links
  to ``/`` would otherwise let ``read_text`` list the disk. Then external access is off and the
  configuration locked.
- No temp directory (DuckDB's default spills to ``CWD/.tmp/``, readable and writable by the SQL); one
  memory budget instead of 80 % of the machine's RAM: DuckDB's own limit is half of it, and the result,
  fetched in batches, is stopped at a quarter, since DuckDB's limit does not cover the table it hands
  back and that table is held twice while it becomes a DataFrame (the defaults keep the whole process
  under 1 GB); a timer interrupts a query past its time (``range(1e12)`` would run on).
"""

from __future__ import annotations

import re
import stat
import threading
from pathlib import Path

import pandas as pd

from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import UsageError
from npuprof.pipeline.sweep.datasets import DATASETS, dataset_path

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY_MB = 768
# the names a person guesses first, beside the datasets' own (view -> {alias: column})
VIEW_ALIASES = {"roots": {"step_wall_ms": "top_step_class_wall_ms_mean"}}
# what may stand before the statement an EXPLAIN explains: blanks, comments, EXPLAIN [ANALYZE]
_EXPLAIN_LEAD = re.compile(r"^(?:\s+|--[^\n]*\n|/\*.*?\*/)*EXPLAIN(?:\s+ANALYZE)?\s+", re.IGNORECASE | re.DOTALL)


def query(
    archive: Path, sql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB
) -> pd.DataFrame:
    """Run ``sql`` — queries only (SELECT, WITH, DESCRIBE, SUMMARIZE, EXPLAIN of a query) — over the
    archive's datasets, each a view named as its dataset (``roots``, ``operators``, ...), within
    ``timeout_s`` seconds and ``memory_mb`` MB (the engine's half and the result's quarter, held twice);
    anything else, or past a limit, is a UsageError."""
    import duckdb

    files = dataset_files(archive)
    check_statements(sql)
    memory = f"{int(memory_mb) // 2}MB"
    with io.duckdb_connection(temp_directory="", memory_limit=memory) as con:
        _create_views(con, files)
        paths = ", ".join(_literal(str(path)) for path in files.values())
        con.execute(f"SET allowed_paths = [{paths}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        try:
            return _run_bounded(con, sql, timeout_s, memory_mb)
        except duckdb.InterruptException:
            raise UsageError(f"query stopped after {timeout_s:g} s (--timeout SECONDS allows more)") from None
        except duckdb.OutOfMemoryException:
            raise UsageError(
                f"query stopped: it needs more than {memory} of its {memory_mb} MB (--memory-limit MB allows more)"
            ) from None
        except duckdb.Error as exc:
            hint = " (DESCRIBE <view> lists a view's columns)" if isinstance(exc, duckdb.BinderException) else ""
            raise UsageError(f"query failed: {str(exc).splitlines()[0]}{hint}") from None


def dataset_files(archive: Path) -> dict[str, Path]:
    """The archive's dataset files by name, each checked: a regular file (not a link) in the archive's
    own ``sweep_data/`` (not a link either), at a path DuckDB reads as itself (no glob characters)."""
    archive = Path(archive).resolve()  # the views' paths and the allowed ones, spelled alike
    folder = archive / schema.SWEEP_DATA_DIR
    if not folder.is_dir():
        raise UsageError(f"{archive} is not a merged sweep archive ({schema.SWEEP_DATA_DIR}/ is missing)")
    if folder.is_symlink():  # its datasets would be whatever the link's target holds
        raise UsageError(f"{folder} is a link: query reads only an archive's own {schema.SWEEP_DATA_DIR}/")
    if io.duckdb_globs(folder):  # it would read other files
        raise UsageError(f"{archive}: query cannot read an archive whose path holds any of * ? [ ] {{ }}: move it")
    files = {}
    for name in DATASETS:
        path = dataset_path(archive, name)
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue  # an older archive may lack a dataset: its view does not exist
        if not stat.S_ISREG(mode):
            raise UsageError(f"{path} is not a regular file (a link or a device): query refuses the archive")
        files[name] = path
    return files


def check_statements(sql: str) -> None:
    """Refuse, before anything runs, SQL that holds anything but queries (an EXPLAIN of a query is one)."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise UsageError(f"query failed: {str(exc).splitlines()[0]}") from None
    refused = [kind for kind in map(_statement_kind, statements) if kind != "SELECT"]
    if refused or not statements:
        what = ", ".join(refused) or "nothing"
        raise UsageError(f"query refused: only queries run over a sweep archive ({what} is not a query)")


def _statement_kind(statement) -> str:
    """A statement's type; an EXPLAIN's is that of the statement it explains (EXPLAIN ANALYZE runs it)."""
    import duckdb

    kind = statement.type.name
    if kind != "EXPLAIN":
        return kind
    lead = _EXPLAIN_LEAD.match(statement.query)
    if lead is None:  # EXPLAIN with options, or spelled so that the inner statement cannot be found
        return "EXPLAIN"
    try:
        inner = duckdb.extract_statements(statement.query[lead.end() :])
    except duckdb.Error:
        return "EXPLAIN"
    kinds = {s.type.name for s in inner}
    return "SELECT" if kinds == {"SELECT"} else f"EXPLAIN {'/'.join(sorted(kinds))}"


def _create_views(con, files: dict[str, Path]) -> None:
    for name, path in files.items():
        source = f"read_parquet({_literal(str(path))})"
        present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        aliases = "".join(
            f", {column} AS {alias}"
            for alias, column in VIEW_ALIASES.get(name, {}).items()
            if column in present and alias not in present
        )
        con.execute(f"CREATE VIEW {name} AS SELECT *{aliases} FROM {source}")


def _run_bounded(con, sql: str, timeout_s: float, memory_mb: int) -> pd.DataFrame:
    """The result of ``sql``, fetched in batches: interrupted past ``timeout_s``, refused past a quarter
    of ``memory_mb`` of result (which DuckDB's own memory limit does not count)."""
    import pyarrow as pa

    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        reader = con.sql(sql).to_arrow_reader(65_536)
        batches, size = [], 0
        for batch in reader:
            size += batch.nbytes
            if size > memory_mb * 2**20 // 4:
                raise UsageError(
                    f"query result exceeds {memory_mb // 4} MB, a quarter of its {memory_mb} MB: add a LIMIT or "
                    "an aggregate (or --memory-limit MB)"
                )
            batches.append(batch)
        return pa.Table.from_batches(batches, schema=reader.schema).to_pandas()
    finally:
        timer.cancel()


def _literal(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"
