"""classify: blocks, classes and anatomy, checked against planted structure and faults (the anomaly
tags of steps are diagnostics', tested in test_diagnostics.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import PYTORCH_DATA, QWEN_TRAINING, analyze_scenarios

from npuprof.pipeline.runner import StageRange, analyze
from npuprof.synth import SCENARIOS

pytestmark = pytest.mark.xdist_group("classify")  # one worker: shares its fixtures

SCENARIO_NAMES = ["clean", "ep_imbalance", "host_bubble", "partial_capture", "pipeline_parallel", "mixed"]


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    return analyze_scenarios(tmp_path_factory.mktemp("classify"), SCENARIO_NAMES, "classify", seed=5)


def read(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / name) if name.endswith(".csv") else pd.read_parquet(out / name)


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_blocks_partition_every_layer_into_attention_then_ffn_or_moe(analyzed, name):
    _, out = analyzed[name]
    layers, blocks = read(out, "layer_summary.csv"), read(out, "block_summary.csv")
    expected_rest = "moe" if SCENARIOS[name].model == "moe" else "ffn"
    per_layer = blocks.groupby(["rank_id", "step_ordinal", "layer_ordinal"])
    kinds = per_layer["block_kind"].agg("->".join)
    roles = layers.set_index(["rank_id", "step_ordinal", "layer_ordinal"])["layer_role"]
    for key, sequence in kinds.items():
        assert sequence == (
            f"attention->{expected_rest}" if roles[key] != "backward" else f"{expected_rest}->attention"
        ), (key, sequence)
    span = per_layer.agg(lo=("pos_start", "min"), hi=("pos_end", "max"), events=("event_count", "sum"))
    merged = layers.set_index(["rank_id", "step_ordinal", "layer_ordinal"]).join(span)
    assert (merged["lo"] == merged["pos_start"]).all() and (merged["hi"] == merged["pos_end"]).all()
    assert (merged["events"] == merged["event_count"]).all()  # blocks cover the layer exactly, no overlap


def test_identical_steps_and_layers_share_classes_across_ranks(analyzed):
    _, out = analyzed["clean"]
    steps, layers = read(out, "step_summary.csv"), read(out, "layer_summary.csv")
    assert steps.groupby("rank_id")["step_class_id"].nunique().max() == 1
    assert steps["step_class_id"].nunique() == 1  # same program, same shapes on every rank
    forward = layers[layers["layer_role"] == "forward"]
    assert forward["layer_class_id"].nunique() == 1
    signatures = json.loads((out / "class_signatures.json").read_text())
    cls = signatures["layer_classes"][forward["layer_class_id"].iloc[0]]
    assert cls["rank_count"] == SCENARIOS["clean"].ranks and cls["member_count"] == len(forward)


def test_a_hot_ep_rank_gets_its_own_moe_block_class(analyzed):
    root, out = analyzed["ep_imbalance"]
    hot = json.loads((root / "ground_truth.json").read_text())["faults"][0]["ranks"][0]
    blocks = read(out, "block_summary.csv")
    moe = blocks[blocks["block_kind"] == "moe"]
    hot_classes = set(moe.loc[moe["rank_id"] == hot, "block_class_id"])
    other_classes = set(moe.loc[moe["rank_id"] != hot, "block_class_id"])
    assert hot_classes and other_classes and not hot_classes & other_classes  # shapes differ: strict classes differ
    attention = blocks[blocks["block_kind"] == "attention"]
    assert attention["block_class_id"].nunique() == 1  # attention is identical everywhere


def test_the_planted_bubble_is_measured_in_its_steps_only(analyzed):
    root, out = analyzed["host_bubble"]
    fault = json.loads((root / "ground_truth.json").read_text())["faults"][0]
    steps = read(out, "step_summary.csv")
    gap_ms = fault["gap_us"] / 1000
    big = steps[steps["largest_internal_bubble_ms"] >= gap_ms * 0.99]
    assert sorted(zip(big["rank_id"], big["step_id"])) == [(fault["ranks"][0], s) for s in fault["step_ids"]]


def test_anatomy_partitions_each_step(analyzed):
    _, out = analyzed["partial_capture"]
    steps, anatomy = read(out, "step_summary.csv"), read(out, "step_anatomy.csv")
    per_step = anatomy.groupby(["rank_id", "step_ordinal"])["event_count"].sum()
    assert (
        per_step.to_numpy()
        == steps.set_index(["rank_id", "step_ordinal"]).loc[per_step.index, "event_count"].to_numpy()
    ).all()
    assert set(anatomy["window"]) == {"head", "main", "tail"}


def test_qwen3_layers_split_after_the_post_attention_norm(tmp_path):
    analyze(QWEN_TRAINING, tmp_path / "out", jobs=2, stage_range=StageRange(to_stage="classify"))
    blocks = read(tmp_path / "out", "block_summary.csv")
    events = pd.read_parquet(tmp_path / "out" / "normalized_events")
    events = events.sort_values(["rank_id", "start_ns", "row_idx"]).reset_index(drop=True)
    events["pos"] = events.groupby("rank_id").cumcount()
    ffn = blocks[(blocks["block_kind"] == "ffn") & (blocks["layer_role"] == "forward")]
    assert len(ffn) == 56
    first = events.set_index(["rank_id", "pos"]).loc[list(zip(ffn["rank_id"], ffn["pos_start"])), "type"]
    assert set(first) == {"RmsNorm"}  # the FFN opens at the post-attention norm
    assert set(ffn["event_count"]) == {5}  # RmsNorm, MatMul (gate/up), SwiGlu, MatMul (down), Add


def test_cnn_steps_are_head_only_with_no_blocks(tmp_path):
    analyze(PYTORCH_DATA / "text" / "level1", tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="classify"))
    anatomy, blocks = read(tmp_path / "out", "step_anatomy.csv"), read(tmp_path / "out", "block_summary.csv")
    assert set(anatomy["anatomy_kind"]) == {"head_only"} and len(blocks) == 0


def test_analysis_facade_exposes_steps_layers_and_blocks(analyzed):
    from npuprof.api import Analysis

    _, out = analyzed["clean"]
    a = Analysis(out)
    assert len(a.steps()) == SCENARIOS["clean"].ranks * SCENARIOS["clean"].steps
    assert set(a.layers()["layer_role"]) == {"forward", "backward"}
    assert set(a.blocks()["block_kind"]) == {"attention", "ffn"}
    assert set(a.step_anatomy()["window"]) == {"head", "main", "tail"}
