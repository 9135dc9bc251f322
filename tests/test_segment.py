"""segment: steps and layers equal the synthetic ground truth, and are right on real captures."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import PYTORCH_DATA, QWEN_TRAINING, analyze_scenarios

from npuprof.pipeline.runner import StageRange, analyze
from npuprof.synth import SCENARIOS, generate

pytestmark = pytest.mark.xdist_group("segment")  # one worker: shares its fixtures


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    return analyze_scenarios(tmp_path_factory.mktemp("segment"), SCENARIOS, "segment", seed=11)


def frames(out: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    steps = pd.read_parquet(out / "step_segments")
    layers = pd.read_parquet(out / "layer_segments")
    manifest = json.loads((out / "segment_manifest.json").read_text())
    return steps, layers, manifest


def captured_ids(frame: pd.DataFrame, truth: dict) -> pd.Series:
    """The generator's step id of each row of a steps or layers ``frame``: its step_id, or in a capture
    without step marks (a serving one, whose forwards carry none) the id of the forward at its ordinal."""
    if truth.get("layout") != "serving":
        return frame["step_id"]
    assert frame["step_id"].isna().all()
    return frame["step_ordinal"].map(dict(enumerate(truth["step_ids"])))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_steps_and_layers_equal_the_ground_truth(analyzed, name):
    root, out = analyzed[name]
    truth = json.loads((root / "ground_truth.json").read_text())
    sc = SCENARIOS[name]
    steps, layers, manifest = frames(out)
    assert manifest["hard_error_count"] == 0 and manifest["interior_island_total"] == 0
    for rank, facts in truth["ranks"].items():
        rank_steps = steps[steps["rank_id"] == int(rank)].sort_values("step_ordinal")
        ids = captured_ids(rank_steps, truth)
        assert sorted(ids[rank_steps["complete"]]) == facts["complete_steps"]
        assert sorted(ids[~rank_steps["complete"]]) == facts["partial_steps"]
        assert (rank_steps.loc[~rank_steps["complete"], "tags"] == "PARTIAL_CAPTURE_BOUNDARY").all()
        complete = rank_steps[rank_steps["complete"]]
        expected = facts["layer_instances_per_complete_step"]
        assert (complete["forward_layers"] == expected["forward"]).all(), (rank, complete["forward_layers"].tolist())
        assert (complete["backward_layers"] == expected["backward"]).all()
        assert (complete["layers_per_pass"] == len(facts["decoder_layers_held"])).all()
        assert (complete["forward_passes"] == (sc.micro_batches if sc.training else 1)).all()
        rank_summary = next(r for r in manifest["rank_summaries"] if r["rank_id"] == int(rank))
        assert rank_summary["decoder_layers_observed"] == len(facts["decoder_layers_held"])
        assert rank_summary["layer_confidence"] == "high"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_layer_boundaries_are_exactly_the_planted_rows(analyzed, name):
    root, out = analyzed[name]
    truth = json.loads((root / "ground_truth.json").read_text())
    _, layers, _ = frames(out)
    first_complete = truth["complete_steps"][0]
    for rank, facts in truth["ranks"].items():
        mine = (layers["rank_id"] == int(rank)) & (captured_ids(layers, truth) == first_complete)
        found = layers[mine].sort_values("layer_ordinal")
        held = facts["decoder_layers_held"]
        expected = [
            (layer["row_start"], layer["row_end"], layer["role"], layer["layer_index"] - held[0])
            for layer in facts["layers_first_complete_step"]
        ]
        got = list(zip(found["row_start"], found["row_end"], found["layer_role"], found["layer_index"]))
        assert got == expected, (rank, got[:4], expected[:4])


def test_qwen3_training_capture_holds_14_layers_per_stage_and_two_micro_batches(tmp_path):
    analyze(QWEN_TRAINING, tmp_path / "out", jobs=2, stage_range=StageRange(to_stage="segment"))
    steps, layers, manifest = frames(tmp_path / "out")
    ranks = {r["rank_id"]: r for r in manifest["rank_summaries"]}
    # 28 decoder layers (the model's public config) split over PP=2: 14 on each captured stage.
    assert ranks[0]["decoder_layers_observed"] == 14 and ranks[2]["decoder_layers_observed"] == 14
    assert ranks[0]["micro_batches_per_step"] == 2 and ranks[2]["micro_batches_per_step"] == 2
    for rank in (0, 2):
        step = steps[steps["rank_id"] == rank].iloc[0]
        assert (step["step_id"], step["forward_layers"], step["backward_layers"], step["recompute_layers"]) == (
            13,
            28,
            28,
            0,
        )
        order = layers[layers["rank_id"] == rank].groupby("pass_index")["layer_role"].first().tolist()
        # stage 0 runs both forwards before the backwards; the last stage (rank 2) alternates: 1F1B
        assert order == (
            ["forward", "forward", "backward", "backward"]
            if rank == 0
            else ["forward", "backward", "forward", "backward"]
        )
        assert set(
            layers.loc[(layers["rank_id"] == rank) & (layers["layer_role"] == "forward"), "anchor_name"].str.contains(
                "FlashAttentionScore_"
            )
        )
        assert (
            layers.loc[(layers["rank_id"] == rank) & (layers["layer_role"] == "backward"), "anchor_name"]
            .str.contains("FlashAttentionScoreGrad")
            .all()
        )
    assert ranks[1]["step_count"] == 0 and ranks[3]["step_count"] == 0  # communication files only
    assert manifest["hard_error_count"] == 0


@pytest.mark.parametrize("level", ["text/level0", "text/level2", "db/level1"])
def test_cnn_captures_have_no_transformer_layers_and_say_so(tmp_path, level):
    analyze(PYTORCH_DATA / level, tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="segment"))
    steps, layers, manifest = frames(tmp_path / "out")
    assert len(layers) == 0
    assert (steps["layer_confidence"] == "none").all() and (steps["layer_count"] == 0).all()
    assert manifest["hard_error_count"] == 0
    assert all("cannot be identified" in " ".join(r["notes"]) for r in manifest["rank_summaries"])


# --- the earlier analyzer's counterexamples, as synthetic kernel sequences -----------------------


def write_rank(tmp_path: Path, sequences: list[list[str]], steps: int = 2) -> Path:
    """A one-rank root whose kernel_details.csv repeats ``sequences`` (Type names) per step."""
    rank_dir = tmp_path / "root" / "rank_0"
    (rank_dir / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    lines = ["Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim"]
    t = 1_700_000_000_000_000
    for step in range(steps):
        for kernel in [k for seq in sequences for k in seq]:
            core = "COMMUNICATION" if kernel.startswith("hcom_") else "AI_CORE"
            name = f"{kernel}_0_1" if kernel.startswith("hcom_") else kernel
            lines.append(f"{step + 1},{name},{kernel},{core},{t}.000\t,10.0,1.0,8")
            t += 11
    (rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "root"


def segment(tmp_path: Path, root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    analyze(root, tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="segment"))
    steps, layers, manifest = frames(tmp_path / "out")
    assert manifest["hard_error_count"] == 0
    return steps, layers


def test_deepseek_mla_prologue_order_starts_layers_at_the_fused_add_norm(tmp_path):
    # AddRmsNormBias → projections → KvRmsNormRopeCache → FIA → TransposeBatchMatMul → o_proj → allReduce
    # → AddRmsNormBias → MoE
    layer = [
        "AddRmsNormBias",
        "QuantBatchMatmul",
        "MatMulV3",
        "KvRmsNormRopeCache",
        "FusedInferAttentionScore",
        "TransposeBatchMatMul",
        "MatMulV3",
        "hcom_allReduce_",
        "AddRmsNormBias",
        "MoeGatingTopK",
        "MoeDistributeDispatch",
        "GroupedMatmul",
        "GroupedMatmul",
        "MoeDistributeCombine",
    ]
    head, tail = ["GatherV2"], ["RmsNorm", "MatMulV3", "ArgMaxWithValue"]
    steps, layers = segment(tmp_path, write_rank(tmp_path, [head] + [layer] * 5 + [tail]))
    assert (steps["main_layer_count"] == 5).all()
    first = layers[layers["step_ordinal"] == 0].sort_values("layer_ordinal")
    assert list(first["pos_start"]) == [
        1 + 14 * k for k in range(5)
    ]  # the first AddRmsNormBias of each layer, not KvRmsNormRopeCache


def test_glm5_mla_markers_alone_set_the_layer_count_and_mtp_layers_are_speculative(tmp_path):
    layer = [
        "AddRmsNorm",
        "MlaPrologV3",
        "KvQuantSparseFlashAttention",
        "TransposeBatchMatMul",
        "MatMulV3",
        "AddRmsNorm",
        "MatMulV3",
        "SwiGlu",
        "MatMulV3",
    ]
    main = [["GatherV2"]] + [layer] * 6 + [["RmsNorm", "MatMulV3", "ArgMaxWithValue"]]
    mtp = [["GatherV2", "MatMulV3"], layer, ["RmsNorm", "MatMulV3", "ArgMaxWithValue"]]
    steps, layers = segment(tmp_path, write_rank(tmp_path, main + mtp))
    assert (steps["main_layer_count"] == 6).all() and (steps["speculative_layers"] == 1).all()
    assert set(layers["anchor_name"]) == {
        "MlaPrologV3"
    }  # sparse attention and V-up-proj inside the layer do not anchor


def test_hybrid_mla_and_kda_layers_anchor_on_their_union(tmp_path):
    kda = ["RmsNorm", "MatMulV3", "ChunkKda", "MatMulV3", "RmsNorm", "MatMulV3", "SwiGlu", "MatMulV3"]
    mla = [
        "RmsNorm",
        "MlaPrologV2",
        "FusedInferAttentionScore",
        "MatMulV3",
        "RmsNorm",
        "MatMulV3",
        "SwiGlu",
        "MatMulV3",
    ]
    body = [kda, kda, kda, mla] * 3
    steps, layers = segment(
        tmp_path, write_rank(tmp_path, [["GatherV2"]] + body + [["RmsNorm", "MatMulV3", "ArgMaxWithValue"]])
    )
    assert (steps["main_layer_count"] == 12).all()
    assert steps["attention_family"].iloc[0] == "hybrid:mla+linear"


def test_dsv4_alternating_sparse_and_flash_layers_all_count(tmp_path):
    csa = [
        "HcPre",
        "RmsNorm",
        "KvCompressEpilog",
        "LightningIndexer",
        "SparseFlashAttention",
        "MatMulV3",
        "HcPost",
        "RmsNorm",
        "MatMulV3",
        "SwiGlu",
        "MatMulV3",
    ]
    hca = [
        "HcPre",
        "RmsNorm",
        "KvCompressEpilog",
        "FlashAttentionScore",
        "MatMulV3",
        "HcPost",
        "RmsNorm",
        "MatMulV3",
        "SwiGlu",
        "MatMulV3",
    ]
    steps, layers = segment(
        tmp_path, write_rank(tmp_path, [["GatherV2"]] + [csa, hca] * 4 + [["RmsNorm", "MatMulV3", "ArgMaxWithValue"]])
    )
    assert (steps["main_layer_count"] == 8).all()
    assert (
        list(layers[layers["step_ordinal"] == 0]["anchor_name"]) == ["SparseFlashAttention", "FlashAttentionScore"] * 4
    )


def test_argmax_is_not_a_step_boundary_when_steps_are_marked(tmp_path):
    layer = ["RmsNorm", "MatMulV3", "FlashAttentionScore", "MatMulV3", "RmsNorm", "MatMulV3", "SwiGlu", "MatMulV3"]
    steps, _ = segment(
        tmp_path, write_rank(tmp_path, [["GatherV2"], layer, ["ArgMaxWithValue"], layer, ["ArgMaxWithValue"]], steps=3)
    )
    assert len(steps) == 3 and set(steps["source"]) == {"step_id"}


def test_without_step_marks_inference_steps_end_at_sampling(tmp_path):
    root = write_rank(
        tmp_path,
        [
            ["GatherV2"],
            ["RmsNorm", "MatMulV3", "FlashAttentionScore", "MatMulV3", "RmsNorm", "MatMulV3", "SwiGlu", "MatMulV3"] * 1,
            ["RmsNorm", "MatMulV3", "ArgMaxWithValue"],
        ],
        steps=4,
    )
    csv_path = next(root.rglob("kernel_details.csv"))
    text = csv_path.read_text().splitlines()
    csv_path.write_text(
        "\n".join([text[0]] + ["," + line.split(",", 1)[1] for line in text[1:]]) + "\n"
    )  # erase Step Id
    steps, layers = segment(tmp_path, root)
    assert len(steps) == 4 and set(steps["source"]) == {"structure"}
    assert (steps["layer_count"] == 1).all()


TO_SEGMENT = ("--to-stage", "segment")


def test_expected_layers_come_from_config_or_catalog_and_are_checked(tmp_path, cli):
    """Layer validation is segment's: each run stops there."""
    run = cli(
        "analyze",
        str(QWEN_TRAINING),
        "-o",
        str(tmp_path / "a"),
        "--model-id",
        "Qwen3-0.6B",
        "--progress",
        "none",
        *TO_SEGMENT,
    )
    assert run.returncode == 0, run.stderr
    validation = run.result["segment"]["layer_validation"]
    # 14 observed layers on each captured rank × 2 pipeline stages = the catalog's 28
    assert validation == {
        "status": "ok",
        "expected_layers": 28,
        "expected_source": "catalog",
        "pipeline_stages": 2,
        "observed_total_layers": [28],
    }
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 32}))
    run = cli(
        "analyze",
        str(QWEN_TRAINING),
        "-o",
        str(tmp_path / "b"),
        "--model-config",
        str(config),
        "--progress",
        "none",
        *TO_SEGMENT,
    )
    assert run.result["segment"]["layer_validation"]["status"] == "mismatch"
    assert any("config says 32" in w for w in run.result["warnings"])
    run = cli("analyze", str(QWEN_TRAINING), "-o", str(tmp_path / "c"), "--progress", "none", *TO_SEGMENT)
    assert run.result["segment"]["layer_validation"]["status"] == "unknown"  # nothing given: no guess
    run = cli(
        "analyze",
        str(QWEN_TRAINING),
        "-o",
        str(tmp_path / "d"),
        "--model-id",
        "NoSuchModel",
        "--progress",
        "none",
        *TO_SEGMENT,
    )
    assert run.returncode == 2 and "model catalog" in run.result["error"]
    assert not (tmp_path / "d").exists()  # refused before anything was written: the corrected run needs no flag


def test_config_json_in_a_synthetic_root_validates_pipeline_stage_layers(tmp_path):
    root = Path(generate(tmp_path / "pp", "pipeline_parallel")["root"])
    (root / "config.json").write_text(json.dumps({"num_hidden_layers": SCENARIOS["pipeline_parallel"].layers}))
    result = analyze(root, tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="segment"))
    assert result["segment"]["layer_validation"]["status"] == "ok"
    assert result["segment"]["layer_validation"]["pipeline_stages"] == 2


def test_without_attention_only_an_exactly_periodic_fallback_gives_layers_with_low_confidence(tmp_path):
    block = ["RmsNorm", "MatMulV3", "SwiGlu", "MatMulV3"]
    steps, layers = segment(
        tmp_path / "periodic", write_rank(tmp_path / "periodic", [["GatherV2"]] + [block] * 6 + [["ArgMaxWithValue"]])
    )
    assert (steps["layer_confidence"] == "low").all() and (steps["layer_count"] > 0).all()
    ragged = [["GatherV2"], block, ["MatMulV3"], block + ["Add"], ["MatMulV3", "Cast"], ["ArgMaxWithValue"]]
    steps, layers = segment(tmp_path / "ragged", write_rank(tmp_path / "ragged", ragged))
    assert len(layers) == 0 and (steps["layer_confidence"] == "none").all()


def test_a_layer_found_without_attention_gets_no_attention_block(tmp_path):
    block = ["RmsNorm", "MatMulV3", "SwiGlu", "MatMulV3"]
    root = write_rank(tmp_path / "periodic", [["GatherV2"]] + [block] * 6 + [["ArgMaxWithValue"]])
    analyze(root, tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="classify"))
    layers = pd.read_parquet(tmp_path / "out" / "layer_segments")
    blocks = pd.read_parquet(tmp_path / "out" / "block_segments")
    assert len(layers) and (layers["attention_family"] == "fallback_periodic").all()
    assert "attention" not in set(blocks["block_kind"])
    assert blocks.groupby(["rank_id", "step_ordinal", "layer_ordinal"]).size().eq(1).all()
    assert (blocks["block_kind"] == "ffn").all()


@pytest.mark.parametrize(
    "config, named",
    [
        ({"num_hidden_layers": 4, "hidden_size": "big", "num_attention_heads": 8}, "field hidden_size is 'big'"),
        ({"num_hidden_layers": 10**400}, "field num_hidden_layers is 1000000000"),
        ({"num_hidden_layers": 4, "vocab_size": True}, "field vocab_size is True"),
        ({"num_hidden_layers": 4, "num_nextn_predict_layers": "x"}, "num_nextn_predict_layers is 'x'"),
    ],
    ids=["string", "10**400", "boolean", "mtp_string"],
)
def test_a_config_json_with_odd_values_is_bad_input_named_by_its_field(tmp_path, config, named):
    """A count in config.json that is text, a boolean or 10**400 is named with its field and file, not
    an internal TypeError or OverflowError further on."""
    from npuprof.pipeline.errors import BadInput
    from npuprof.pipeline.stages.segment.expected import expected_model

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(BadInput, match=named.replace("(", r"\(")):
        expected_model(str(path), None, str(tmp_path))


def test_an_odd_config_json_in_a_root_fails_it_in_one_line(tmp_path, cli):
    root = Path(generate(tmp_path / "root", "clean", steps=3, layers=2, trace=False)["root"])
    (root / "config.json").write_text('{"num_hidden_layers": 2, "hidden_size": 1' + "0" * 400 + "}")
    run = cli("analyze", str(root), "-o", str(tmp_path / "out"), "--progress", "none")
    assert run.returncode == 3 and "Traceback" not in run.stderr, run.stderr
    assert "config.json" in run.result["error"] and "field hidden_size is 1000" in run.result["error"]
