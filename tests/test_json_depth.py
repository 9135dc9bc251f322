"""The nesting-depth scan that guards the streaming trace reader, against the depth of the parsed value."""

from __future__ import annotations

import io
import json
import random

import pytest

from npuprof.pipeline.sources import json_depth

TRICKY = ["a[b", "c]{", 'q"uote', "back\\slash", '\\"', "\\\\", "[[[", "}}}", 'x\\\\\\"y']


def _random_value(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.3:
        return rng.choice([rng.choice(TRICKY), rng.randint(-5, 5), None, True, ""])
    if rng.random() < 0.5:
        return [_random_value(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(TRICKY) + str(i): _random_value(rng, depth - 1) for i in range(rng.randint(0, 3))}


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@pytest.mark.parametrize("block", [1, 2, 3, 7, 1 << 20])
def test_the_scan_finds_the_parsed_depth_across_block_boundaries(monkeypatch, block):
    monkeypatch.setattr(json_depth, "SCAN_BLOCK_BYTES", block)
    rng = random.Random(block)
    for _ in range(60):
        value = _random_value(rng, 6)
        text = json.dumps(value).encode()
        depth = _depth(value)
        handle = io.BytesIO(text)
        assert json_depth.too_deep_at(handle, depth) is None, text
        assert handle.tell() == 0
        if depth:
            offset = json_depth.too_deep_at(io.BytesIO(text), depth - 1)
            assert offset is not None and text[offset : offset + 1] in (b"[", b"{"), text


def test_a_hundred_thousand_nested_lists_are_found_at_the_first_bracket_past_the_limit():
    text = b'[{"args": {"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}]"
    offset = json_depth.too_deep_at(io.BytesIO(text), 128)
    assert offset == text.index(b"[", 19) + 125  # array, event, args: three levels before the lists
