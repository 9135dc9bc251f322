"""trace_view.json's top-level array of events cut into blocks for Arrow's JSON reader: each block read at
its own offset and cut after its last separator between two events, then turned into one event per line
(by Arrow's substring replacement where the block's separators are the common forms, else exactly by
pattern). Anything that is not a layout for it raises NeedsEventReader: the event-by-event reader
(``host_trace._streamed``) reads such a file."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

# async_npu writes its flow ids as numbers, HostToDevice as text (past int64 at times): text for both
_NUMBER_FLOW_ID = re.compile(rb'"id": ?(\d+)')
_TEXT_FLOW_ID = re.compile(rb'"id": ?"')
HEAD_BYTES = 1 << 16  # where a block's separator forms are read from
COMMON_SEPARATORS = frozenset({b"}, {", b"},{"})  # torch_npu's, and where two lists of events were joined
BLOCK_BYTES = 8 << 20  # read per block: 16 and 32 MB are no faster and hold more memory
LONGEST_EVENT_BYTES = 128 << 20  # a block grows to hold an event up to this long
PARSE_BLOCK_BYTES = 2 << 20  # Arrow parses these on every core; an event must fit in one

# between two events of the array: torch_npu writes "}, {", sometimes "},{", others one per line
_BETWEEN_EVENTS = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")


class NeedsEventReader(Exception):
    """The columnar reader cannot read this file exactly as the event-by-event reader would."""


def _last_separator(data: memoryview, start: int) -> re.Match | None:
    """The last separator between two events at or after ``start`` (the tail first: it is short)."""
    for lo in (max(start, len(data) - (1 << 20)), start):
        last = None
        for last in _BETWEEN_EVENTS.finditer(data, lo):
            pass
        if last is not None:
            return last
    return None


def _first_event_offset(source: pa.NativeFile) -> int:
    head = source.read_at(min(source.size(), 1 << 16), 0)
    after_bracket = head.index(b"[") + 1
    return after_bracket + len(head[after_bracket:]) - len(head[after_bracket:].lstrip())


def _event_blocks(source: pa.NativeFile) -> Iterator[pa.Buffer]:
    """The events of a top-level array, a block at a time, each block cut after its last separator
    (the separators between its events are left as they are). Each block is read at its own offset
    into Arrow's pool, so no block is copied to join a partial event to the next one."""
    size, lo = source.size(), _first_event_offset(source)
    window = BLOCK_BYTES
    while True:
        source.seek(lo)
        data = source.read_buffer(window)
        if lo + len(data) >= size:  # the last block: up to the closing bracket
            data = _rstripped(data)
            if data[max(0, data.size - 1) :].to_pybytes() != b"]":
                raise NeedsEventReader  # truncated: the event reader says where
            yield _rstripped(data[: data.size - 1])
            return
        with memoryview(data) as view:
            # a longer window starts where the last one ended (less a long separator): that part had none
            cut = _last_separator(view, 0 if window == BLOCK_BYTES else window // 2 - 4096)
            cut_start, cut_end = (cut.start(), cut.end()) if cut is not None else (0, 0)
            del cut
        if not cut_end:
            if window >= LONGEST_EVENT_BYTES:
                raise NeedsEventReader  # no event ends in the window: not a layout for this reader
            window *= 2
            continue
        yield data[: cut_start + 1]
        lo, window = lo + cut_end - 1, BLOCK_BYTES  # from the next event's "{"


def _rstripped(events: pa.Buffer) -> pa.Buffer:
    """``events`` without the whitespace that ends it (looked for in its last 4 KB)."""
    tail = events[max(0, events.size - 4096) :].to_pybytes()
    return events[: events.size - (len(tail) - len(tail.rstrip()))]


def exact_ndjson(events: bytes) -> bytes:
    """One event per line, flow ids as text, every separator found by the pattern.

    A separator inside a string or a nested value puts a line break where JSON forbids one (or
    splits a value across lines), so Arrow refuses such a block instead of misreading it."""
    lines = _BETWEEN_EVENTS.sub(b"}\n{", events)
    pieces = _NUMBER_FLOW_ID.split(lines)  # text, digits, text, …: quoting the digits is a join
    pieces[1::2] = [b'"id": "' + digits + b'"' for digits in pieces[1::2]]
    return b"".join(pieces)


def fast_ndjson(events: pa.Buffer) -> pa.Buffer:
    """One event per line by Arrow's substring replacement (no GIL, several times the pattern's
    speed): the separator forms of the block's head and the common ones. Text flow ids move to
    ``sid``, so numeric ones parse as numbers under ``id``. A separator of another form leaves two
    events on one line, and a separator inside a string a line break where JSON forbids one: Arrow
    refuses either, and the block is read by the exact conversion."""
    head = events[:HEAD_BYTES].to_pybytes()
    forms = {match.group() for match in _BETWEEN_EVENTS.finditer(head)} | COMMON_SEPARATORS
    offsets = pa.py_buffer(np.array([0, len(events)], dtype=np.int64))
    lines = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, events])
    for form in sorted(forms):
        lines = pc.replace_substring(lines, form, b"}\n{")
    for key in {match.group() for match in _TEXT_FLOW_ID.finditer(head)} | {b'"id": "'}:
        lines = pc.replace_substring(lines, key, key.replace(b'"id"', b'"sid"'))
    _, value_offsets, data = lines.buffers()
    first, last = np.frombuffer(value_offsets, dtype=np.int64)[lines.offset : lines.offset + 2]
    return data[first:last]


def read_ndjson(body: pa.Buffer, schema: pa.Schema) -> pa.Table:
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    return pajson.read_json(pa.BufferReader(body), pajson.ReadOptions(block_size=PARSE_BLOCK_BYTES), options)


def prepared_blocks(source: pa.NativeFile) -> Iterator[tuple[pa.Buffer, pa.Buffer]]:
    """Each block with its fast conversion; the next block is read and converted on a thread while
    the caller parses this one (both release the GIL)."""
    blocks = _event_blocks(source)

    def prepare() -> tuple[pa.Buffer, pa.Buffer] | None:
        block = next(blocks, None)
        return None if block is None else (block, fast_ndjson(block))

    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = pool.submit(prepare)
        while (prepared := ahead.result()) is not None:
            ahead = pool.submit(prepare)
            yield prepared
