"""torch_npu's name for a communication group (shared/spec/input-formats.md §2.3): one definition for
the reader (summarize matches communication.json's "@hash" suffixes to parallel groups with it) and the
writer (synth names its groups with it). tests/test_summarize.py pins it to a real capture's value."""

from __future__ import annotations


def double_hash(text: str) -> int:
    """Two 32-bit polynomial hashes of ``text`` (×29 and ×131) packed as (h1 << 32) | h2."""
    h1 = h2 = 0
    for char in text:
        h1 = (h1 * 29 + ord(char)) & 0xFFFFFFFF
        h2 = (h2 * 131 + ord(char)) & 0xFFFFFFFF
    return (h1 << 32) | h2
