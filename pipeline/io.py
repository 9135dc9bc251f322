"""The one I/O layer of output dirs: atomic writes, JSON reads, the failure document, table reads.

Every artifact is written to a temp path beside its target, then renamed, so a reader sees either
the old complete file or the new complete file, never a half one. ``failure.json`` is written by
``write_failure`` and read by ``read_failure`` only.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from npuprof.pipeline import read_cache, schema
from npuprof.pipeline.csv_formulas import formula_safe_table
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.json_text import json_text  # noqa: F401 (io.json_text: the one JSON writer)

if TYPE_CHECKING:
    import duckdb  # imported where a connection is opened: it costs 0.16 s a process

# DuckDB's file readers take a name as a glob pattern: a path holding one of these may name other files
DUCKDB_GLOB_CHARACTERS = frozenset("*?[]{}")


def duckdb_globs(path: str | Path) -> bool:
    """Whether DuckDB would read ``path`` as a glob pattern (and so maybe as other files than itself)."""
    return any(character in str(path) for character in DUCKDB_GLOB_CHARACTERS)


def duckdb_connection(**settings: object) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB connection (``settings`` added to its configuration) that loads and installs
    no extension and draws no progress bar: DuckDB prints one on stdout past 2 s of a query in a session
    it takes for an interactive one (``python -c``, a notebook), inside whatever we print there."""
    import duckdb

    config = {"autoinstall_known_extensions": False, "autoload_known_extensions": False, **settings}
    connection = duckdb.connect(":memory:", config=config)
    connection.execute("SET enable_progress_bar = false")
    return connection


def write_with(target: Path, writer: Callable[[Path], None]) -> Path:
    """Run ``writer(tmp)`` and rename tmp onto ``target``; the temp file is removed on failure.

    ``tmp`` has ``target``'s name inside a new private dir beside it (``mkdtemp``: a random name, created
    exclusively, mode 0700): a link planted at a name someone could guess (once ``.<name>.<pid>.tmp``) is
    never written through, and the writer sees the target's own suffix."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    tmp = scratch / target.name
    try:
        writer(tmp)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def remove(path: Path) -> None:
    """Remove an artifact or a dir; a link where one should be is removed itself, never followed (an
    --overwrite, or a work dir made at a name one can guess, must not delete or write into what it names)."""
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def unlinked_destination(base: Path, relative: str | Path) -> Path:
    """``base / relative`` for a write that must land there: BadInput when a dir on the way below
    ``base`` is a link (writing through it would put the file wherever the link points). The file
    itself may be a link: ``write_with`` renames over it, replacing the link, never its target."""
    destination = Path(base) / relative
    current = Path(base)
    for part in Path(relative).parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise BadInput(current, "is a link in the destination: refusing to write through it")
    return destination


def text_of_path(path: str | Path | None) -> str | None:
    """A path as UTF-8 text for tables: bytes that are not UTF-8 shown as ``\\xff`` escapes (the
    exact path stays resolvable through source_index.json, which keeps it)."""
    if path is None:
        return None
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def write_json(target: Path, payload: Any) -> Path:
    """Write ``payload`` as indented UTF-8 JSON, atomically."""
    text = json_text(payload, indent=2)

    def _write(tmp: Path) -> None:
        tmp.write_text(text + "\n", encoding="utf-8")

    return write_with(target, _write)


def write_parquet(target: Path, table: pa.Table) -> Path:
    """Write an Arrow table as one Parquet file, atomically.

    Dictionary-encode the text columns (kernel names, types, shapes repeat a lot) and keep
    min/max statistics only on integer columns (times, rows, steps: what filters push down on);
    statistics on text columns cost a third of the write time and serve no query of ours.
    """
    text = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_list(f.type)]
    integers = [f.name for f in table.schema if pa.types.is_integer(f.type)]

    def _write(tmp: Path) -> None:
        pq.write_table(table, tmp, compression="lz4", use_dictionary=text, write_statistics=integers)

    return write_with(target, _write)


def write_bytes(target: Path, payload: bytes | str | Iterable[bytes]) -> Path:
    """Write rendered bytes (text is UTF-8 encoded), atomically; an iterable of byte chunks is
    written chunk by chunk as it is produced."""
    if isinstance(payload, (bytes, str)):
        data = payload.encode("utf-8") if isinstance(payload, str) else payload
        return write_with(target, lambda tmp: tmp.write_bytes(data))

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            for chunk in payload:
                handle.write(chunk)

    return write_with(target, write)


CHUNK_ROWS = 25_000  # rows rendered per thread task (CSV and JSON Lines)


def rendered_in_chunks(row_count: int, render: Callable[[int, int], bytes]) -> Iterator[bytes]:
    """``render(lo, hi)`` of successive row ranges, CHUNK_ROWS at a time, on a thread each (Arrow's
    number-to-text casts and joins release the GIL), yielded in order; one range for zero rows."""
    bounds = [(lo, min(lo + CHUNK_ROWS, row_count)) for lo in range(0, max(row_count, 1), CHUNK_ROWS)]
    if len(bounds) == 1:
        yield render(*bounds[0])
        return
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        yield from pool.map(lambda bound: render(*bound), bounds)


def csv_chunks(frame, header: bool = True) -> Iterator[bytes]:
    """A DataFrame as CSV bytes, in chunks of rows, in order; ``header``: start with the column names.
    Formula-leading text cells are neutralised (``formula_safe``)."""
    import pyarrow.csv as pacsv

    table = _timestamps_fixed(formula_safe_table(pa.Table.from_pandas(frame, preserve_index=False)))

    def render(lo: int, hi: int) -> bytes:
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table.slice(lo, hi - lo), sink, pacsv.WriteOptions(include_header=header and lo == 0))
        return sink.getvalue().to_pybytes()

    return rendered_in_chunks(table.num_rows, render)


TIMESTAMP_MIN = 1e15  # µs since 1970 are ~1.7e15: Arrow writes them as 1.7642468770733635e+15


def _timestamps_fixed(table: pa.Table) -> pa.Table:
    """``table`` with each float column that holds timestamps (a value of magnitude ≥ TIMESTAMP_MIN) as
    fixed-point text with 3 decimals (1764246877073363.500), which a spreadsheet or a reader takes as
    written; Arrow's shortest form puts an exponent on them. Vectorised: the whole µs and the thousandths
    apart (the whole part is exact in a float64, and so is what is left of it)."""
    for position, field in enumerate(table.schema):
        if not pa.types.is_floating(field.type):
            continue
        column = pc.cast(table.column(position), pa.float64())
        largest = pc.max(pc.abs(column)).as_py()
        if largest is None or largest < TIMESTAMP_MIN:
            continue
        magnitude = pc.abs(column)
        whole = pc.floor(magnitude)
        thousandths = pc.round(pc.multiply(pc.subtract(magnitude, whole), 1000.0))
        carry = pc.greater_equal(thousandths, 1000.0)  # .9996 rounds up into the next whole µs
        whole = pc.if_else(carry, pc.add(whole, 1.0), whole)
        thousandths = pc.cast(pc.if_else(carry, 0.0, thousandths), pa.int64())
        digits = pc.utf8_lpad(pc.cast(thousandths, pa.string()), 3, "0")
        text = pc.binary_join_element_wise(pc.cast(pc.cast(whole, pa.int64()), pa.string()), digits, ".")
        text = pc.if_else(pc.less(column, 0.0), pc.binary_join_element_wise("-", text, ""), text)
        table = table.set_column(position, field.name, text)
    return table


def write_csv(target: Path, frame) -> Path:
    """Write a DataFrame as CSV, atomically; the header is always written."""
    return write_bytes(target, csv_chunks(frame))


def move_dir_into_place(work: Path, final: Path) -> None:
    """Replace ``final`` by the finished directory ``work`` (a rename; an older ``final`` is removed first)."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(work, final)


def utc_now() -> str:
    """The current UTC time as ISO 8601 seconds (the stamp of manifests and failures)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is not a finite number")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path: Path, finite: bool = False) -> Any:
    """Parse a small JSON file; BadInput with line and column when it is broken. ``finite``: a capture's
    file, where NaN, Infinity and numbers that overflow a float are malformed too."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(path, f"cannot read file: {exc.strerror or exc}") from None
    return parse_json(raw, path, finite)


def parse_json(raw: bytes, path: Path, finite: bool = False) -> Any:
    """``raw`` (the bytes of the JSON file ``path``) parsed as ``read_json`` does."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(path, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    hooks = {"parse_float": _finite, "parse_constant": _no_constant} if finite else {}
    try:
        return json.loads(text, **hooks)
    except json.JSONDecodeError as exc:
        raise BadInput(path, f"broken JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None
    except ValueError as exc:  # a hook refused a number
        raise BadInput(path, f"malformed number: {exc}") from None
    except RecursionError:  # thousands of nested brackets: no profiler writes that, an attacker can
        raise BadInput(
            path, "nested too deeply to read (more levels of arrays or objects than a capture has)"
        ) from None


def read_json_or_empty(path: Path) -> dict:
    """An artifact npuprof wrote, or ``{}`` when it does not exist (a stage that did not run)."""
    return read_json(path) if Path(path).exists() else {}


def write_failure(out_dir: Path, failure: dict, traceback: str | None = None) -> dict:
    """Write ``failure.json``: the failure object (status, phase, kind, error, exit_code, …) and when.

    ``failure`` is what ``errors.failure_object`` returns (also carried inside service markers);
    the traceback of an internal error is kept in the file, never printed.
    """
    payload = {"status": "failed", **failure, "failed_at": utc_now()}
    if traceback:
        payload["traceback"] = traceback
    write_json(Path(out_dir) / schema.FAILURE_JSON, payload)
    return payload


def read_failure(out_dir: Path) -> dict | None:
    """The failure document of an output dir, or None when it has none (or it is unreadable)."""
    path = Path(out_dir) / schema.FAILURE_JSON
    if not path.exists():
        return None
    try:
        failure = read_json(path)
    except BadInput:
        return {"status": "failed", "phase": "unknown", "error": f"{path} is unreadable"}
    return failure if isinstance(failure, dict) else None


THREADED_READ_ROWS = 65_536  # below this, handing columns to threads costs more than it saves


def _partition_files(path: Path) -> list[tuple[int, Path]] | None:
    """Each rank partition's file under a per-rank table, in the order a dataset scan reads them
    (paths sorted as text), or None when the layout is not one file per ``rank_id=<r>`` dir."""
    try:
        entries = sorted((entry.name, entry.path) for entry in os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):
        return None
    files = []
    for name, place in entries:
        rank = _partition_rank(name)
        file = Path(place) / schema.PARTITION_FILE
        if rank is None or len(os.listdir(place)) != 1 or not file.is_file():
            return None
        files.append((rank, file))
    return files


def _partition_rank(name: str) -> int | None:
    """The rank of a partition dir named ``rank_id=<r>``; None for any other name."""
    prefix = f"{schema.RANK_PARTITION_KEY}="
    rank = name[len(prefix) :]
    return int(rank) if name.startswith(prefix) and rank.isdigit() else None


def partition_ranks(out_dir: Path, table: schema.Table) -> list[int]:
    """The ranks with a partition of the per-rank ``table`` on disk, in numeric order."""
    try:
        names = os.listdir(Path(out_dir) / table.path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(rank for rank in map(_partition_rank, names) if rank is not None)


def _read_file(path: Path, columns: list[str] | None, dictionary: tuple[str, ...]) -> pa.Table:
    """One Parquet file by its own reader: a dataset's discovery and scan set-up cost milliseconds a
    call, which a small root's dozens of table reads per stage add up to."""
    parquet = pq.ParquetFile(path, read_dictionary=list(dictionary) or None)
    threads = parquet.metadata.num_rows >= THREADED_READ_ROWS
    return parquet.read(columns=columns, use_threads=threads).replace_schema_metadata(parquet.schema_arrow.metadata)


def _read_partitions(files: list[tuple[int, Path]], columns: list[str] | None, dictionary: tuple[str, ...]) -> pa.Table:
    """Every rank's file with its ``rank_id`` appended, as a hive dataset scan gives them."""
    tables = []
    for rank, file in files:
        table = _read_file(file, columns, dictionary)
        tables.append(table.append_column(schema.RANK_PARTITION_KEY, pa.array([rank] * table.num_rows, pa.int32())))
    if len({table.schema for table in tables}) > 1:
        raise _NotOneSchema
    return pa.concat_tables(tables)


def _no_rows(
    table: schema.Table, columns: list[str] | tuple[str, ...] | None, dictionary: tuple[str, ...], with_rank: bool
) -> pa.Table:
    """What reading ``table`` gives where no rank wrote a row (a rank without device events writes
    only the partitions that have rows): its declared columns, typed as a read would type them."""
    empty = table.schema.empty_table()
    for name in dictionary:
        if name in empty.column_names:
            coded = pa.dictionary(pa.int32(), empty.schema.field(name).type)
            empty = empty.set_column(empty.schema.get_field_index(name), name, pa.array([], coded))
    if with_rank:
        empty = empty.append_column(schema.RANK_PARTITION_KEY, pa.array([], pa.int32()))
    wanted = [c for c in columns if with_rank or c != schema.RANK_PARTITION_KEY] if columns is not None else None
    return empty.select(wanted) if wanted is not None else empty


def _listed(columns: list[str] | tuple[str, ...] | None) -> list[str] | None:
    return list(columns) if columns is not None else None


class _NotOneSchema(Exception):
    """Rank files of one table with different schemas: the dataset scan unifies them."""


def read_dataset(
    out_dir: Path,
    table: schema.Table,
    rank_id: int | None = None,
    *,
    columns: list[str] | tuple[str, ...] | None = None,
    filter: pc.Expression | None = None,
    dictionary: tuple[str, ...] = (),
) -> pa.Table:
    """Read a per-rank table (all ranks with an int32 ``rank_id`` column, or one rank's partition).

    ``columns`` projects (only those columns are read from disk) and ``filter`` is pushed down into
    the scan, so a stage reads only what it needs. ``dictionary`` text columns come back
    dictionary-encoded, as they are stored: no string per row when only their codes matter.
    Without a filter the files are read directly (the tables are the same as a scan's).
    """
    path = Path(out_dir) / table.path
    if rank_id is not None and not (Path(out_dir) / table.partition(rank_id)).is_file():
        return _no_rows(table, columns, dictionary, with_rank=False)  # a rank without rows writes none
    if filter is None and rank_id is not None:
        return _read_file(Path(out_dir) / table.partition(rank_id), _listed(columns), dictionary)
    files = _partition_files(path) if filter is None and rank_id is None else None
    if files == []:
        return _no_rows(table, columns, dictionary, with_rank=True)
    if files:
        projected = [c for c in columns if c != schema.RANK_PARTITION_KEY] if columns is not None else None
        files_stamp = read_cache.stamp(files)
        held = read_cache.kept(path, files_stamp, projected, dictionary, schema.RANK_PARTITION_KEY)
        if held is not None:
            return held
        try:
            read = _read_partitions(files, projected, dictionary)
        except _NotOneSchema:
            pass
        else:
            read_cache.keep(path, files_stamp, projected, dictionary, read)
            return read
    return _scan(path, table, rank_id, columns, filter, dictionary)


def _scan(
    path: Path,
    table: schema.Table,
    rank_id: int | None,
    columns: list[str] | tuple[str, ...] | None,
    filter: pc.Expression | None,
    dictionary: tuple[str, ...],
) -> pa.Table:
    """A per-rank table through a dataset scan: the filter pushed down, partitions pruned."""
    file_format = ds.ParquetFileFormat(dictionary_columns=list(dictionary)) if dictionary else "parquet"
    if rank_id is not None:
        return ds.dataset(path / f"{schema.RANK_PARTITION_KEY}={rank_id}", format=file_format).to_table(
            columns=_listed(columns), filter=filter
        )
    dataset = ds.dataset(path, format=file_format, partitioning="hive")
    if not dataset.files:  # the scan's own listing: no rank wrote a row
        return _no_rows(table, columns, dictionary, with_rank=True)
    wanted = None
    if columns is not None:
        wanted = [c for c in columns if c != schema.RANK_PARTITION_KEY] + [schema.RANK_PARTITION_KEY]
    result = dataset.to_table(columns=wanted, filter=filter)
    index = result.schema.get_field_index(schema.RANK_PARTITION_KEY)
    return result.set_column(index, schema.RANK_PARTITION_KEY, result.column(index).cast(pa.int32()))


def int_ranks(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with an int64 rank_id (partitions read it as int32 / categorical)."""
    if "rank_id" in frame and len(frame):
        return frame.assign(rank_id=frame["rank_id"].astype("int64"))
    return frame
