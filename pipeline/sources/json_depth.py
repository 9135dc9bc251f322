"""How deep a JSON file nests, found without parsing it: a guard before a parser whose cost grows
with the square of the depth.

ijson keeps, for every open level, the dotted path to it: a file of 100,000 nested lists (an 80 KB
trace event) makes it hold 10^10 bytes of paths. No profiler nests more than a handful of levels, so
a streaming reader first asks ``too_deep_at`` and refuses such a file by name. The scan is vectorised
over blocks: quotes not escaped by an odd run of backslashes open and close strings, and brackets
outside strings count the depth.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np

from npuprof.pipeline.errors import BadInput

SCAN_BLOCK_BYTES = 8 << 20
MAX_NESTING = 128  # levels; torch_npu's trace events nest 3 or 4 (array, event, args, a list)

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPENS, _CLOSES = (ord("["), ord("{")), (ord("]"), ord("}"))


class _ScanState:
    """What one block hands the next: the depth, whether a string is open, the trailing backslashes."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.backslashes = 0


def _block_depths(block: np.ndarray, state: _ScanState) -> np.ndarray:
    """The nesting depth after each byte of ``block`` (strings' contents do not count); updates ``state``."""
    positions = np.arange(len(block), dtype=np.int64)
    is_backslash = block == _BACKSLASH
    # the last byte before each position that is not a backslash (-1: only backslashes since the block began)
    last_plain = np.maximum.accumulate(np.where(~is_backslash, positions, -1))
    before = np.concatenate(([-1], last_plain[:-1]))
    run = positions - 1 - before + np.where(before < 0, state.backslashes, 0)
    quote = (block == _QUOTE) & (run % 2 == 0)
    open_strings = (np.cumsum(quote) + state.in_string) % 2  # after each byte: inside a string?
    outside = np.concatenate(([state.in_string], open_strings[:-1])) == 0
    step = (np.isin(block, _OPENS) & outside).astype(np.int64) - (np.isin(block, _CLOSES) & outside)
    depths = state.depth + np.cumsum(step)
    state.depth = int(depths[-1])
    state.in_string = bool(open_strings[-1])
    trailing = len(block) - 1 - int(last_plain[-1])
    state.backslashes = trailing + (state.backslashes if last_plain[-1] < 0 else 0)
    return depths


def too_deep_at(handle: BinaryIO, limit: int = MAX_NESTING) -> int | None:
    """The byte offset where the file first nests deeper than ``limit`` levels, or None; reads the
    file from its current position to its end and seeks back there."""
    start = handle.tell()
    state, offset = _ScanState(), start
    try:
        while chunk := handle.read(SCAN_BLOCK_BYTES):
            depths = _block_depths(np.frombuffer(chunk, dtype=np.uint8), state)
            over = np.flatnonzero(depths > limit)
            if len(over):
                return offset + int(over[0])
            offset += len(chunk)
        return None
    finally:
        handle.seek(start)


def refuse_too_deep(path: Path, handle: BinaryIO, limit: int = MAX_NESTING) -> None:
    """BadInput naming ``path`` and the byte where it nests deeper than ``limit`` levels."""
    deep = too_deep_at(handle, limit)
    if deep is not None:
        raise BadInput(path, f"JSON nested deeper than {limit} levels at byte {deep}: not a trace a profiler wrote")
