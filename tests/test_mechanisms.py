"""Table-driven tests of the segmentation mechanisms on hand-made event sequences: the cut offset of
a pass, cut placement with an inserted kernel, window metrics, and the block split of a layer.

Sequences are strings of one-letter kernels so each case reads as what it tests:
``N`` a norm (opens a forward layer / block), ``A`` an attention core (the anchor), ``M`` a matmul,
``S`` a SwiGlu / FFN kernel, ``X`` anything else, ``G`` a norm-grad (closes a backward layer),
``B`` a backward attention core, ``E`` an expert (MoE) kernel, ``C`` an AI CPU op.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from npuprof.pipeline.joined_text import joined_per_key
from npuprof.pipeline.jsonlines import NullableRecord, jsonl_bytes
from npuprof.pipeline.segmentation.features import EventFeatures
from npuprof.pipeline.segmentation.windows import window_metrics
from npuprof.pipeline.stages.classify.blocks import split_layers
from npuprof.pipeline.stages.classify.classes import normalized_kernel_name, normalized_kernel_names
from npuprof.pipeline.stages.segment.layers import _best_offset, _cuts, _template_extent

ROLES = {
    "N": {"normalization"},
    "A": {"attention"},
    "M": {"compute"},
    "S": {"ffn", "compute"},
    "X": set(),
    "G": {"normalization"},
    "B": {"attention"},
    "H": set(),  # a communication op
    "E": {"moe", "compute"},
    "C": {"aicpu"},
}
ALL_ROLES = ("attention", "attention_aux", "moe", "ffn", "compute", "normalization", "aicpu", "selection", "sampling")


def features_of(sequence: str) -> EventFeatures:
    """EventFeatures of a one-letter kernel sequence (backward kernels: G and B)."""
    letters = np.array(list(sequence))
    backward = np.isin(letters, ["G", "B"])
    role_flags = {role: np.array([role in ROLES[c] for c in sequence], dtype=bool) for role in ALL_ROLES}
    return EventFeatures(
        anchor_family=np.where(np.isin(letters, ["A", "B"]), "flash", ""),
        backward=backward,
        opening=role_flags["normalization"] & ~backward,
        closing=role_flags["normalization"] & backward,
        role_flags=role_flags,
        kernel_key=np.unique(letters, return_inverse=True)[1].astype(np.int64),
        fallback=role_flags["compute"],
        pass_marker=np.zeros(len(sequence), dtype=bool),
        floating_communication=letters == "H",
    )


def anchors_of(sequence: str, letter: str) -> np.ndarray:
    return np.array([i for i, c in enumerate(sequence) if c == letter])


@pytest.mark.parametrize(
    ("sequence", "expected_offset", "why"),
    [
        ("NMAMNSM" * 3, 2, "plain layers: the input norm is 2 before attention"),
        ("NMNNAMNSM" * 3, 4, "QK-norm: a norm right before attention too; the first layer decides the outer one"),
        ("XX" + "NMAMNSM" * 3, 2, "a head before the first layer does not move the offset"),
    ],
)
def test_forward_offset_is_the_one_that_fits_the_outermost_layer(sequence, expected_offset, why):
    features = features_of(sequence)
    anchors = anchors_of(sequence, "A")
    offset, fits = _best_offset(anchors, 0, len(sequence) - 1, features.opening, forward=True)
    assert offset == expected_offset, why
    assert fits == len(anchors)


def test_backward_offset_cuts_after_the_closing_norm_grad():
    sequence = "MBMG" * 3  # backward layer: grads of the ffn, attention grad, then the input-norm grad
    features = features_of(sequence)
    offset, fits = _best_offset(anchors_of(sequence, "B"), 0, len(sequence) - 1, features.closing, forward=False)
    assert (offset, fits) == (2, 3)


@pytest.mark.parametrize(
    ("sequence", "template", "expected_start"),
    [
        # the first backward layer (rows 1-5) after a head kernel X, matched against the second layer
        ("X" + "SMMBG" + "SMMBG", (6, 10), 1),
        # a gradient bucket's all-reduce H started inside the template layer, after its first kernel
        ("X" + "SMMBG" + "SHMMBG", (6, 11), 1),
        # ... and in the layer matched: neither side counts it
        ("X" + "SMHMBG" + "SMMBG", (7, 11), 1),
    ],
)
def test_the_first_backward_layer_matches_its_template_whatever_communication_lands_inside(
    sequence, template, expected_start
):
    features = features_of(sequence)
    end = template[0] - 1  # the first layer ends where the template begins
    start = _template_extent(features.kernel_key, *template, end, 0, -1, features.floating_communication)
    assert start == expected_start


@pytest.mark.parametrize(
    ("sequence", "expected_starts"),
    [
        ("NMAMNSM" * 3, [0, 7, 14]),
        ("NMAMNSM" + "NMAMCNSM" + "NMAMNSM", [0, 7, 15]),  # an AI CPU op inserted inside the second layer
        ("NMAMNSM" + "NCMAMNSM" + "NMAMNSM", [0, 7, 15]),  # one inserted before attention: that layer's own offset
    ],
)
def test_cuts_place_every_layer_start_at_its_opening_norm(sequence, expected_starts):
    features = features_of(sequence)
    starts, all_fit, _ = _cuts(anchors_of(sequence, "A"), 0, len(sequence) - 1, features.opening, True, None)
    assert starts.tolist() == expected_starts and all_fit


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        # (start, end) in ns of the window's events → wall, busy, underfeed, bubbles ≥ 50 µs, largest
        ([(0, 100_000), (100_000, 200_000)], (0.2, 0.2, 0.0, 0.0, 0.0, 0)),
        ([(0, 100_000), (160_000, 200_000)], (0.2, 0.14, 0.06, 0.06, 0.06, 1)),
        ([(0, 100_000), (120_000, 200_000)], (0.2, 0.18, 0.02, 0.0, 0.0, 0)),  # a 20 µs gap is launch noise
        ([(0, 300_000), (50_000, 100_000), (400_000, 500_000)], (0.5, 0.4, 0.1, 0.1, 0.1, 1)),  # nested kernel
    ],
)
def test_window_metrics_wall_busy_and_bubbles(intervals, expected):
    start = np.array([s for s, _ in intervals], dtype=np.int64)
    end = np.array([e for _, e in intervals], dtype=np.int64)
    metrics = window_metrics(
        np.array([0]), np.array([len(intervals) - 1]), start, end, np.zeros(len(intervals), np.int64), 50_000
    )
    row = metrics.iloc[0]
    got = (
        row["wall_ms"],
        row["busy_ms"],
        row["underfeed_ms"],
        row["internal_bubble_total_ms"],
        row["largest_internal_bubble_ms"],
        row["bubble_count"],
    )
    assert got == pytest.approx(expected)


def test_window_metrics_of_several_windows_are_independent():
    start = np.array([0, 100, 1_000_000, 1_000_100], dtype=np.int64)
    end = start + 50
    metrics = window_metrics(np.array([0, 2]), np.array([1, 3]), start, end, np.zeros(4, np.int64), 50_000)
    assert metrics["wall_ms"].tolist() == pytest.approx(
        [150 / 1e6, 150 / 1e6]
    )  # the gap between them counts in neither


@pytest.mark.parametrize(
    ("sequence", "direction", "has_attention", "expected"),
    [
        ("NMAMNSM", "forward", True, [(0, 3, "attention"), (4, 6, "ffn")]),
        ("NMAMNEE", "forward", True, [(0, 3, "attention"), (4, 6, "moe")]),
        ("NMAMNCC", "forward", True, [(0, 3, "attention"), (4, 6, "aicpu")]),
        ("NMAMNXX", "forward", True, [(0, 3, "attention"), (4, 6, "other")]),
        ("MSMGMBMG", "backward", True, [(0, 3, "ffn"), (4, 7, "attention")]),
        ("NMSMNMSM", "forward", False, [(0, 7, "ffn")]),  # a fallback-anchored layer has no attention block
    ],
)
def test_block_split_at_the_post_attention_norm(sequence, direction, has_attention, expected):
    features = features_of(sequence)
    anchor = sequence.index("A") if "A" in sequence else sequence.index("B") if "B" in sequence else 0
    found = split_layers([0], [len(sequence) - 1], [anchor], [direction == "backward"], [has_attention], features)
    assert (found.layer == 0).all() and list(found.ordinal) == list(range(len(expected)))
    assert list(zip(found.start.tolist(), found.end.tolist(), found.kind.tolist())) == expected


def test_columnar_json_lines_read_back_as_the_records():
    names = pd.Series(['a"b', "back\\slash", "new\nline", "\x01ctl", "名前", None], dtype="string[pyarrow]")
    starts = np.array([0.5, 1e21, np.nan, np.inf, -2.25, 3.0])
    steps = pd.Series([1, None, 3, 4, 5, 6], dtype="Int64")
    tags = pa.array([["a", 'q"t'], [], None, ["x"], ["名"], ["z", "w"]], pa.list_(pa.string()))
    attribution = NullableRecord({"tags": tags, "n": np.arange(6)}, np.array([1, 1, 0, 1, 0, 1], bool))
    text = jsonl_bytes(
        {
            "name": names,
            "start_us": starts,
            "step": steps,
            "inner": {"row": np.arange(6), "flag": None},
            "k": "x",
            "soft": attribution,
        },
        6,
    )
    records = [json.loads(line) for line in text.decode("utf-8").split("\n")[:-1]]
    assert [r["name"] for r in records] == ['a"b', "back\\slash", "new\nline", "\x01ctl", "名前", None]
    assert [r["start_us"] for r in records] == [0.5, 1e21, None, None, -2.25, 3]
    assert [r["step"] for r in records] == [1, None, 3, 4, 5, 6]
    assert [r["inner"] for r in records] == [{"row": i, "flag": None} for i in range(6)]
    assert [r["soft"] for r in records] == [
        {"tags": ["a", 'q"t'], "n": 0},
        {"tags": [], "n": 1},
        None,
        {"tags": ["x"], "n": 3},
        None,
        {"tags": ["z", "w"], "n": 5},
    ]
    assert {r["k"] for r in records} == {"x"} and jsonl_bytes({"a": np.arange(0)}, 0) == b""


def test_vectorised_kernel_name_normalisation_equals_the_per_name_rule():
    names = [
        "hcom_allReduce__503_79995_1",
        "Kernel0xdeadbeef_x",
        "abc0123456789abcdef0123_z",
        "__x__",
        "名前Abc_1",
        "ÄÖ0x1f",
        "",
        "MatMul-V3(2)" * 20,
        "İstanbul9",
    ]
    assert list(normalized_kernel_names(np.array(names, dtype=object))) == [normalized_kernel_name(n) for n in names]


def test_text_joined_per_group_keeps_order_and_empty_groups():
    group = np.array([0, 0, 0, 2, 2])
    values = np.array([5, 1, 9, 3, 4])
    assert list(joined_per_key(group, values, 4)) == ["5;1;9", "", "3;4", ""]
    assert list(joined_per_key(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 1, ",")) == [""]
