"""trace_view.json's top-level array of events, read by DuckDB's JSON reader (one thread, in file order) a
batch of rows at a time, as the event schema's columns.

Where the event-by-event reader looks at a value's JSON type (a pid must be an integer, a flow id an
integer or a text, a process name a text, a duration a number), those fields are read as raw JSON and
checked here: anything of another type, a text with an escape, an event too long for DuckDB's buffer,
or JSON DuckDB refuses raises NeedsEventReader, and the file is read event by event — the
reference this reader is tested against. Decided Dec 6 (issue 50): DuckDB parses torch_npu's traces in
half the CPU of Arrow's JSON reader over blocks cut at the events' separators, which it replaces.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline.input_files import descriptor_path, open_input
from npuprof.pipeline.io import duckdb_connection

if TYPE_CHECKING:
    import duckdb

BATCH_ROWS = 1 << 17
# DuckDB's default object limit: a larger one grows its read buffer (on a 1 GB trace 32 MB peaked 8 % higher,
# 128 MB 55 %); an event past the buffer (32 MB at this limit) is read by the event reader
LONGEST_EVENT_BYTES = 16 << 20
INTEGERS = ("pid", "tid")  # JSON integers, as the event reader's process keys
NUMBERS = ("dur",)  # JSON numbers
TIMES = ("ts",)  # µs as a JSON text (torch_npu's) or number: kept as text
IDS = ("id",)  # a flow's id: a JSON integer or text, kept as text
ARGS_TEXTS = ("name", "labels")  # an M event's process name and labels: JSON texts
ARGS_NUMBERS = ("data size(Byte)", "size(Byte)")  # a copy's and an HCCL task's bytes: JSON numbers


class NeedsEventReader(Exception):
    """The columnar reader cannot read this file exactly as the event-by-event reader would."""


def event_batches(path: Path, schema: pa.Schema) -> Iterator[pa.Table]:
    """The events of ``path`` (a top-level JSON array), ``schema``'s fields in file order, a batch at a
    time; NeedsEventReader where they must be read event by event."""
    import duckdb

    columns = ", ".join(f"'{field.name}': '{_duckdb_type(field, raw=field.name in _RAW)}'" for field in schema)
    query = (
        f"SELECT * FROM read_json($path, format = 'array', columns = {{{columns}}}, "
        f"maximum_object_size = {LONGEST_EVENT_BYTES})"
    )
    # DuckDB reads the file checked, by its descriptor's path: a plain name, never a glob (rank?/ would
    # take every rank's trace), ~ or scheme://, whatever the file's own name holds
    with open_input(path) as checked:
        try:
            reader = _connection().sql(query, params={"path": descriptor_path(checked)}).to_arrow_reader(BATCH_ROWS)
            for batch in reader:
                yield _typed(pa.Table.from_batches([batch]), schema)
        except (duckdb.Error, OSError, pa.ArrowException):  # an error mid-stream comes through Arrow's reader
            raise NeedsEventReader from None


_CONNECTIONS: dict[int, duckdb.DuckDBPyConnection] = {}


def _connection() -> duckdb.DuckDBPyConnection:
    """This process's DuckDB connection (one thread; ``io.duckdb_connection``): opened once, as opening one
    costs more than reading a small rank's trace; a forked child opens its own."""
    if os.getpid() not in _CONNECTIONS:  # a parent's connection is left as it is: never closed in a child
        _CONNECTIONS[os.getpid()] = duckdb_connection(threads=1)
    return _CONNECTIONS[os.getpid()]


_RAW = frozenset({*INTEGERS, *NUMBERS, *TIMES, *IDS})
_ARGS_RAW = frozenset({*ARGS_TEXTS, *ARGS_NUMBERS})


def _duckdb_type(field: pa.Field, raw: bool = False) -> str:
    if pa.types.is_struct(field.type):
        members = ", ".join(f'"{f.name}" {_duckdb_type(f, raw=f.name in _ARGS_RAW)}' for f in field.type)
        return f"STRUCT({members})"
    if raw:
        return "JSON"
    return {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.float64(): "DOUBLE"}[field.type]


def _typed(batch: pa.Table, schema: pa.Schema) -> pa.Table:
    """The batch's raw JSON fields checked and typed as ``schema``."""
    columns = []
    for field in schema:
        column = batch.column(field.name).combine_chunks()
        if field.name in INTEGERS or field.name in NUMBERS:
            column = _cast(_unquoted_numbers(column), field.type)
        elif field.name in TIMES:
            column = _number_texts(column)
        elif field.name in IDS:
            column = _ids(column)
        elif pa.types.is_struct(field.type):
            column = _typed_args(column, field.type)
        columns.append(column if column.type == field.type else _cast(column, field.type))
    return pa.table(columns, schema=schema)


def _typed_args(args: pa.StructArray, struct: pa.StructType) -> pa.StructArray:
    members = []
    for member in struct:
        values = args.field(member.name)
        if member.name in ARGS_TEXTS:
            values = _texts(values)
        elif member.name in ARGS_NUMBERS:
            values = _cast(_unquoted_numbers(values), member.type)
        members.append(values)
    return pa.StructArray.from_arrays(members, fields=list(struct), mask=args.is_null())


def _cast(raw: pa.Array, to: pa.DataType) -> pa.Array:
    try:
        return pc.cast(raw, to)  # Arrow's cast takes JSON's number forms and refuses every other text
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise NeedsEventReader from None


def _quoted(raw: pa.Array) -> pa.Array:
    return pc.fill_null(pc.starts_with(raw, '"'), False)


def _unquoted_numbers(raw: pa.Array) -> pa.Array:
    """Raw JSON that must be numbers (a text is the event reader's to judge)."""
    if pc.any(_quoted(raw)).as_py():
        raise NeedsEventReader
    return raw


def _texts(raw: pa.Array) -> pa.Array:
    """Raw JSON that must be texts without escapes, as their texts."""
    quoted = _quoted(raw)
    if not pc.all(pc.or_kleene(quoted, raw.is_null())).as_py():
        raise NeedsEventReader
    return _as_texts(raw, quoted)


def _as_texts(raw: pa.Array, quoted: pa.Array) -> pa.Array:
    """``raw`` with its ``quoted`` values as the texts they quote (an escape is the event reader's to
    decode), the others as written."""
    if not pc.any(quoted).as_py():
        return pc.cast(raw, pa.string())
    if pc.any(pc.match_substring(raw, "\\")).as_py():
        raise NeedsEventReader
    return pc.if_else(quoted, pc.utf8_slice_codeunits(raw, 1, -1), raw)


def _number_texts(raw: pa.Array) -> pa.Array:
    """A time written as a JSON text or number, as text (the caller parses it as a float)."""
    return _as_texts(raw, _quoted(raw))


def _ids(raw: pa.Array) -> pa.Array:
    """A flow id as the event reader keeps it: a JSON integer's digits or a JSON text; any other type
    is for it to judge."""
    quoted = _quoted(raw)
    integer = pc.fill_null(pc.match_substring_regex(raw, r"^(0|-?[1-9][0-9]*)$"), False)
    if not pc.all(pc.or_kleene(pc.or_(quoted, integer), raw.is_null())).as_py():
        raise NeedsEventReader
    return _as_texts(raw, quoted)
