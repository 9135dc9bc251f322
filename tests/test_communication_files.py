"""communication.json / communication_matrix.json: the typed reader (msgspec, only the fields read) gives
the table the checked reader (the standard parser, every value checked) gives, and a file it refuses
reaches the checked reader, whose error names what is wrong and where."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import QWEN_TRAINING

from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.sources import communication_files as files
from npuprof.synth import generate

READERS = {
    "communication.json": (files.read_communication_json, files._checked_ops),
    "communication_matrix.json": (files.read_communication_matrix, files._checked_links),
}


def _outcome(reader, path: Path):
    try:
        return reader(path)
    except BadInput as error:
        return str(error)


def _same(path: Path) -> object:
    typed, checked = (_outcome(reader, path) for reader in READERS[path.name])
    if isinstance(checked, str):
        assert typed == checked
    else:
        pd.testing.assert_frame_equal(typed, checked)
    return checked


@pytest.fixture(scope="module")
def real_files(tmp_path_factory) -> list[Path]:
    # the real Qwen3 capture (collective and p2p, LOCAL and HCCS links) and a synthetic MoE decode
    synth = Path(generate(tmp_path_factory.mktemp("comm") / "root", "ep_imbalance", seed=3)["root"])
    found = sorted(QWEN_TRAINING.rglob("communication*.json")) + sorted(synth.rglob("communication*.json"))
    assert {p.name for p in found} == set(READERS)
    return found


def test_the_typed_reader_gives_the_checked_readers_table(real_files):
    for path in real_files:
        decoder = files._OP_FILE if path.name == "communication.json" else files._LINK_FILE
        assert files._typed(path, decoder) is not None, path  # the fast path read it
        table = _same(path)
        assert isinstance(table, pd.DataFrame) and len(table), path


# (edit, what both readers must make of it): a table (odd, not wrong) or an error naming the file
FIRST = "*"  # the first key there
VARIANTS = {
    "communication.json": {
        "text number": (("Communication Time Info", "Elapse Time(ms)"), "0.5", "error"),
        "null number": (("Communication Time Info", "Elapse Time(ms)"), None, "error"),
        "true number": (("Communication Time Info", "Elapse Time(ms)"), True, "error"),
        "huge number": (("Communication Time Info", "Elapse Time(ms)"), 1e308, "table"),
        "int size": (("Communication Bandwidth Info", FIRST, "Transit Size(MB)"), 7, "table"),
        "text size": (("Communication Bandwidth Info", FIRST, "Transit Size(MB)"), "7", "error"),
        "list op": ((), [1, 2], "error"),
    },
    "communication_matrix.json": {
        "text number": (("Transit Size(MB)",), "0.5", "error"),
        "null number": (("Bandwidth(GB/s)",), None, "error"),
        "true number": (("Transit Time(ms)",), True, "error"),
        "huge number": (("Transit Size(MB)",), 1e308, "table"),
        "number transport": (("Transport Type",), 7, "table"),
        "list link": ((), [1, 2], "error"),
    },
}
BYTE_VARIANTS = {"bom": "table", "NaN": "error", "1e999": "error", "not utf-8": "error", "truncated": "error"}


def _first_record(data: dict, name: str) -> tuple[dict, str]:
    """(the object holding the first op (or link) of the first step, that op's key)."""
    step = next(iter(data.values()))
    block = next(value for value in step.values() if value)
    if name == "communication_matrix.json":
        block = next(iter(block.values()))
    return block, next(iter(block))


def _edited(data: dict, name: str, keys: tuple, value: object) -> dict:
    holder, key = _first_record(data, name)
    for part in keys:
        holder, key = holder[key], next(iter(holder[key])) if part == FIRST else part
    holder[key] = value
    return data


def _bytes_edited(text: bytes, label: str) -> bytes:
    if label == "bom":
        return b"\xef\xbb\xbf" + text
    cut = text.index(b":", text.index(b"Transit Size")) + 1  # where the first size's number starts
    rest = text[cut:].lstrip(b" 0123456789.e-")
    return (
        text[:cut]
        + {"NaN": b"NaN", "1e999": b"1e999", "not utf-8": b'"\xff"'}.get(label, b"")
        + (b"" if label == "truncated" else rest)
    )


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_file_the_typed_reader_refuses_is_judged_by_the_checked_reader(real_files, tmp_path, name):
    text = next(p for p in real_files if p.name == name).read_bytes()
    cases = {
        label: (json.dumps(_edited(json.loads(text), name, keys, value)).encode(), expected)
        for label, (keys, value, expected) in VARIANTS[name].items()
    }
    renamed = json.loads(text)
    renamed["phase1"] = renamed.pop(next(iter(renamed)))
    cases["bad step key"] = (json.dumps(renamed).encode(), "error")
    if name == "communication_matrix.json":  # a link that is not "<src>-<dst>"
        bad_link = json.loads(text)
        holder, key = _first_record(bad_link, name)
        holder["a-b"] = holder.pop(key)
        cases["bad link"] = (json.dumps(bad_link).encode(), "error")
    cases.update({label: (_bytes_edited(text, label), expected) for label, expected in BYTE_VARIANTS.items()})
    for label, (content, expected) in cases.items():
        path = tmp_path / label.replace(" ", "_") / name
        path.parent.mkdir()
        path.write_bytes(content)
        outcome = _same(path)
        if expected == "table":
            assert isinstance(outcome, pd.DataFrame) and len(outcome), (label, outcome)
        else:  # one line naming the file
            assert isinstance(outcome, str) and name in outcome and "\n" not in outcome, (label, outcome)


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_file_nested_a_thousand_levels_deep_is_bad_input_not_a_crash(tmp_path, name):
    """Issue 71: 1,000 nested objects (6 KB) beside the ops made the typed decoder raise RecursionError,
    an internal error that failed the root; both readers now refuse the file as bad input, by name."""
    deep = '{"x":' * 1000 + "{}" + "}" * 1000
    path = tmp_path / name
    path.write_text('{"step1": {"collective": {}, "p2p": {}}, "deep": ' + deep + "}")
    for reader in READERS[name]:
        with pytest.raises(BadInput, match="nested too deeply"):
            reader(path)
