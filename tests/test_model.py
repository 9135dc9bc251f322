"""Model fingerprint, catalog ranking, config comparison, hardware peaks, FLOPs, roofline and MFU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import QWEN_TRAINING, run_cli

from npuprof.pipeline import schema
from npuprof.pipeline.modelinfo.hardware import choose, cube_peak_tflops
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.pipeline.stages.model.flops import estimate
from npuprof.synth import SCENARIOS

pytestmark = pytest.mark.xdist_group("planted")


def _fields(out: Path) -> dict:
    table = pd.read_csv(out / schema.MODEL_INFERRED_CONFIG_CSV.file, dtype={"value": str})
    return {row.field: (None if pd.isna(row.value) else int(row.value)) for row in table.itertuples()}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_fingerprint_equals_the_planted_model_on_every_scenario(planted_outputs, name):
    root, out = planted_outputs[name]
    planted = json.loads((root / "ground_truth.json").read_text())["model"]["config"]
    found = _fields(out)
    assert {k: found.get(k) for k in planted} == planted
    features = pd.read_csv(out / schema.MODEL_FEATURE_SUMMARY_CSV.file).set_index("feature")["present"]
    family = json.loads((root / "ground_truth.json").read_text())["model"]
    assert features["moe"] == ("yes" if family["family"] == "moe" else "no")
    assert features["mla"] == ("yes" if family["attention"] == "mla" else "no")
    assert features["gqa"] == ("yes" if family["attention"] == "gqa" else "no")


def test_a_sharded_capture_says_its_values_are_scaled_by_the_recorded_tp_size(planted_outputs):
    _, out = planted_outputs["clean_inference"]  # TP 4: each rank holds 4 of 16 heads
    table = pd.read_csv(out / schema.MODEL_INFERRED_CONFIG_CSV.file).set_index("field")
    assert table.loc["num_attention_heads", "note"] == "4 per rank × TP 4"
    assert table.loc["num_attention_heads", "confidence"] == "medium"
    assert int(table.loc["vocab_size_or_lm_head_shard", "value"]) == 151936 // 4


def test_the_closest_catalog_model_of_a_shrunken_qwen3_differs_only_in_its_layer_count(planted_outputs):
    _, out = planted_outputs["clean"]  # Qwen3-0.6B's shapes, 4 layers planted
    candidates = pd.read_csv(out / schema.MODEL_CANDIDATE_SUMMARY_CSV.file)
    first = candidates.iloc[0]
    assert first["model"] == "Qwen3-0.6B" and first["mismatched_fields"] == "num_hidden_layers=4/28"
    assert "best" not in set(candidates["status"])  # nothing agrees on every field: no model is claimed


def test_a_cnn_capture_names_no_transformer_model_and_no_transformer_feature(sample_outputs):
    # the real CNN training sample (Conv2D, no attention kernel, no decoder layer): it agrees with every
    # catalog model on the few fields it shows, which is no evidence of any of them
    out, _ = sample_outputs["text_level1"]
    insights = json.loads((out / schema.MODEL_INSIGHTS).read_text())
    assert insights["transformer"]["present"] is False and insights["candidates"] == []
    assert insights["best_candidate"] is None
    assert [k for k, v in insights["features"].items() if v["present"]] == []  # "dense" was claimed before
    assert pd.read_csv(out / schema.MODEL_CANDIDATE_SUMMARY_CSV.file).empty
    report = (out / schema.REPORT_MD).read_text()
    assert "Not read as a transformer" in report and "Llama" not in report


def test_a_transformer_is_recognised_by_its_attention_kernels(planted_outputs):
    for name in ("clean", "ep_imbalance"):  # GQA FlashAttention; MLA
        insights = json.loads((planted_outputs[name][1] / schema.MODEL_INSIGHTS).read_text())
        assert insights["transformer"]["present"] is True and insights["candidates"], name


def _summarized_on(out: Path, tmp_path: Path, hardware_model: str) -> Path:
    """A copy of an analyzed output with the model stage re-run for a named NPU (the host's CANN not read)."""
    target = tmp_path / "out"
    shutil.copytree(out, target)
    options = AnalyzeOptions(hardware_model=hardware_model, cann_hardware_scan=False)
    analyze(None, target, jobs=1, stage_range=StageRange(from_stage="model", to_stage="model"), options=options)
    return target


@pytest.fixture(scope="module")
def qwen3(sample_outputs) -> Path:
    return sample_outputs["qwen3_training"][0]


def test_the_real_qwen3_capture_is_fingerprinted_as_qwen3_0_6b_without_a_config(qwen3):
    found = _fields(qwen3)
    assert found["hidden_size"] == 1024
    assert found["num_attention_heads"] == 16 and found["num_key_value_heads"] == 8
    assert found["head_dim"] == 128 and found["intermediate_size"] == 3072
    assert found["num_hidden_layers"] == 28  # 14 per stage × PP 2
    assert found["vocab_size"] == 151936
    features = pd.read_csv(qwen3 / schema.MODEL_FEATURE_SUMMARY_CSV.file).set_index("feature")["present"]
    assert features["qk_norm"] == "yes" and features["gqa"] == "yes" and features["moe"] == "no"
    candidates = pd.read_csv(qwen3 / schema.MODEL_CANDIDATE_SUMMARY_CSV.file)
    assert candidates.iloc[0]["model"] == "Qwen3-0.6B" and candidates.iloc[0]["status"] == "best"
    evidence = pd.read_csv(qwen3 / schema.MODEL_INFERRED_CONFIG_CSV.file).set_index("field")
    # every shape-read field cites a kernel and a source row that holds it
    rank, row = evidence.loc["hidden_size", "evidence_rank_row"].removeprefix("r").split(":row")
    kernels = pd.read_parquet(qwen3 / schema.NORMALIZED_EVENTS, filters=[("rank_id", "=", int(rank))])
    cited = kernels[kernels["row_idx"] == int(row)].iloc[0]
    assert cited["type"] == evidence.loc["hidden_size", "evidence_kernel"]


def test_the_analysis_api_returns_the_model_and_efficiency_tables(qwen3):
    from npuprof.api.analysis import Analysis

    analysis = Analysis(qwen3)
    model = analysis.model()
    assert model["inferred_config"].set_index("field").loc["hidden_size", "value"] == 1024
    assert model["candidates"].iloc[0]["model"] == "Qwen3-0.6B" and "config_overview" not in model
    efficiency = analysis.efficiency()
    assert set(efficiency) == {"hardware", "peaks", "operators", "steps"}
    assert efficiency["operators"]["flops_per_call"].notna().any()


def test_the_real_capture_names_no_npu_so_mfu_is_not_computed_but_flops_are(qwen3):
    hardware = json.loads((qwen3 / schema.HARDWARE_INSIGHTS).read_text())
    assert hardware["chosen_by"] == "unresolved" and hardware["mfu"]["mean"] is None
    steps = pd.read_csv(qwen3 / schema.STEP_EFFICIENCY_CSV.file)
    assert steps["cube_flops"].gt(1e13).all() and steps["mfu"].isna().all()


def test_the_real_capture_on_a_named_910b3_has_a_plausible_mfu(qwen3, tmp_path):
    target = _summarized_on(qwen3, tmp_path, "Ascend910B3")
    steps = pd.read_csv(target / schema.STEP_EFFICIENCY_CSV.file)
    assert steps["mfu"].between(0.01, 1).all()
    hardware = json.loads((target / schema.HARDWARE_INSIGHTS).read_text())
    assert hardware["chosen_by"] == "hardware_model" and hardware["mfu"]["dtype"] == "bf16"
    flash = pd.read_csv(target / schema.OPERATOR_EFFICIENCY_SUMMARY_CSV.file)
    flash = flash[flash["type"] == "FlashAttentionScore"].iloc[0]
    assert flash["mfu"] == pytest.approx(
        flash["flops_per_call"] / (flash["duration_avg_us"] / 1e6) / 1e12 / hardware["cube_tflops"]["bf16"]
    )


def test_a_qwen3_config_json_agrees_and_its_parameters_match_the_published_size(qwen3, tmp_path):
    config = {
        "num_hidden_layers": 28,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "out"
    analyze(
        QWEN_TRAINING,
        out,
        jobs=1,
        stage_range=StageRange(to_stage="model"),
        options=AnalyzeOptions(model_config=str(path)),
    )
    overview = pd.read_csv(out / schema.MODEL_CONFIG_OVERVIEW_CSV.file)
    assert set(overview["agreement"]) == {"match"} and len(overview) == 7
    params = pd.read_csv(out / schema.MODEL_PARAMETER_ESTIMATE_CSV.file).set_index("component")["parameters"]
    # Qwen3-0.6B's model card: 0.44 B non-embedding parameters
    assert params["total"] - params["embedding"] == pytest.approx(0.44e9, rel=0.01)
    kv = pd.read_csv(out / schema.MODEL_KV_CACHE_ESTIMATE_CSV.file).iloc[0]
    assert kv["bytes_per_token"] == 2 * 8 * 128 * 2 * 28  # K and V, 8 heads × 128, bf16, 28 layers


def test_a_family_name_lets_the_fingerprint_pick_the_variant(tmp_path):
    out = tmp_path / "out"
    analyze(
        QWEN_TRAINING, out, jobs=1, stage_range=StageRange(to_stage="model"), options=AnalyzeOptions(model_id="qwen3")
    )
    segment = json.loads((out / "segment_manifest.json").read_text())
    assert segment["expected_layers"] is None  # a family names no layer count
    candidates = pd.read_csv(out / schema.MODEL_CANDIDATE_SUMMARY_CSV.file)
    assert set(candidates["family"]) == {"qwen3"}
    assert candidates.iloc[0]["model"] == "Qwen3-0.6B" and candidates.iloc[0]["status"] == "best"


def test_a_shared_expert_is_the_gated_ffn_over_the_layers_own_tokens():
    from npuprof.pipeline.stages.model.fingerprint import Parallel, infer

    # a DeepSeek-V2-Lite MoE block on one of 4 EP ranks: 256 tokens, 1536 routed (top-6), 16 local experts
    # of width 1408, and one shared FFN over the 256 tokens that is two experts wide
    kernels = [
        ("AddRmsNorm", "aiv", "256,2048;256,2048;2048", "256,2048"),
        ("MoeGatingTopK", "aiv", "256,64", "256,6;256,6"),
        ("GroupedMatmul", "aic", "1536,2048;16,2048,2816;16", "1536,2816"),
        ("SwiGlu", "aiv", "1536,2816", "1536,1408"),
        ("GroupedMatmul", "aic", "1536,1408;16,1408,2048;16", "1536,2048"),
        ("SwiGlu", "aiv", "256,5632", "256,2816"),
    ]
    ops = pd.DataFrame(
        [
            {
                "rank_id": 0,
                "type": t,
                "name": t,
                "op_type": o,
                "input_shapes": i,
                "output_shapes": out,
                "call_count": 27,
                "layer_call_count": 27,
                "block_kind": "moe",
                "row_start": n,
                "evidence_id": f"r0.op{n}",
            }
            for n, (t, o, i, out) in enumerate(kernels)
        ]
    )
    found = infer(ops, Parallel(tp=1, pp=1, ep=4), {}).fields
    assert found["n_routed_experts"].value == 64 and found["num_experts_per_tok"].value == 6
    assert found["moe_intermediate_size"].value == 1408 and found["n_shared_experts"].value == 2
    assert found["n_shared_experts"].evidence[0]["shapes"] == "256,5632 -> 256,2816"


# -- FLOPs by hand ---------------------------------------------------------------------------------


def test_matmul_flops_are_two_m_n_k_with_either_operand_transposed():
    assert estimate("MatMulV3", "aic", "4096,1024;1024,2048", "4096,2048", "ND;ND").flops == 2 * 4096 * 2048 * 1024
    wgrad = estimate("MatMulV3", "aic", "4096,1024;4096,2048", "1024,2048", "ND;ND")  # xᵀ·dy
    assert wgrad.flops == 2 * 1024 * 2048 * 4096
    batched = estimate("BatchMatMulV2", "aic", "8,128,64;8,64,256", "8,128,256", "ND;ND")
    assert batched.flops == 2 * 8 * 128 * 256 * 64
    grouped = estimate("GroupedMatmul", "aic", "1536,2048;16,2048,2048;16", "1536,2048", "ND;ND;ND")
    assert grouped.flops == 2 * 1536 * 2048 * 2048
    assert estimate("MatMulV2", "aic", "9496,256,16,16;64,256,16,16", "64,9496,16,16", "FRACTAL_NZ;ND").flops is None


def test_flash_attention_flops_follow_the_layout_and_the_causal_mask():
    # the real capture's call: SBH q [4096, 1, 2048], softmax max [1, 16, 4096, 8], a 2048² causal mask
    forward = estimate(
        "FlashAttentionScore",
        "mix_cv",
        "4096,1,2048;4096,1,1024;4096,1,1024;;;;2048,2048;;;;;;;;",
        "1,16,4096,8;1,16,4096,8;;4096,1,2048",
        "ND",
    )
    assert forward.flops == 4 * 1 * 4096 * 4096 * 2048 / 2 and forward.confidence == "high"
    backward = estimate(
        "FlashAttentionScoreGrad",
        "mix_cv",
        "4096,1,2048;4096,1,1024;4096,1,1024;4096,1,2048;2048,2048;1,16,4096,8;1,16,4096,8;;4096,1,2048",
        "4096,1,2048;4096,1,1024;4096,1,1024",
        "ND",
    )
    assert backward.flops == 2.5 * forward.flops
    bnsd = estimate("FlashAttentionScore", "mix_cv", "2,32,1024,128;2,8,1024,128;2,8,1024,128", "", "ND")
    assert bnsd.flops == 4 * 2 * 1024 * 1024 * 32 * 128  # no mask: full score matrix
    paged = estimate("FusedInferAttentionScore", "mix_cv", "256,16,192;256,1,576;256,1,512", "256,16,128", "ND")
    assert paged.flops is None  # the KV length is not in the shapes


# -- hardware --------------------------------------------------------------------------------------


def test_a_capture_that_names_only_the_910b_family_leaves_the_variant_and_mfu_open():
    hw = choose(None, None, False, ["Ascend910B"])
    assert not hw.resolved and hw.candidates == ["Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4"]
    assert any("--hardware-model" in text for text in hw.limitations)


def test_named_hardware_peaks_are_cores_times_clock_times_the_cube(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUPROF_CANN_PLATFORM_DIR", str(tmp_path / "none"))
    hw = choose("ascend910b3", None, True, [])
    assert hw.cube_tflops["bf16"] == pytest.approx(20 * 1.8e9 * 16 * 16 * 16 * 2 / 1e12)
    assert hw.cube_tflops["int8"] == pytest.approx(2 * hw.cube_tflops["bf16"])
    assert "hardware_profiles.yaml" in hw.sources["cube_tflops"]


def test_the_hosts_cann_ini_replaces_the_catalog_numbers_and_says_so(tmp_path, monkeypatch):
    platform = tmp_path / "cann" / "compiler" / "data" / "platform_config"
    platform.mkdir(parents=True)
    (platform / "Ascend910B3.ini").write_text(
        "[version]\nSoC_version=Ascend910B3\nShort_SoC_version=Ascend910B\n[SoCInfo]\ncube_core_cnt=18\n"
        "vector_core_cnt=36\nmemory_size=68719476736\n[AICoreSpec]\ncube_freq=1650\nvec_calc_size=128\n"
        "[DtypeMKN]\nDefault=16,16,16\nDT_INT8=16,32,16\n"
    )
    monkeypatch.setenv("NPUPROF_CANN_PLATFORM_DIR", str(tmp_path / "cann"))
    hw = choose("Ascend910B3", None, True, [])
    assert hw.cube_tflops["bf16"] == pytest.approx(cube_peak_tflops(18, 1650, [16, 16, 16]))
    assert str(platform / "Ascend910B3.ini") in hw.sources["cube_tflops"]
    # the capture names only the family: the host's one ini of it is used, with the caveat
    guessed = choose(None, None, True, ["Ascend910B"])
    assert guessed.how == "cann_ini_only_family_match" and "not proof" in " ".join(guessed.limitations)
    assert not choose("Ascend910B3", None, False, []).sources["cube_tflops"].endswith(".ini")


def test_mfu_with_a_named_npu_is_cube_flops_over_step_wall_over_the_peak(planted_outputs, tmp_path):
    _, out = planted_outputs["clean"]
    target = _summarized_on(out, tmp_path, "Ascend910B1")
    steps = pd.read_csv(target / schema.STEP_EFFICIENCY_CSV.file)
    peak = cube_peak_tflops(24, 1850, [16, 16, 16])
    expected = steps["cube_flops"] / (steps["wall_ms"] / 1e3) / 1e12 / peak
    assert steps["mfu"].to_numpy() == pytest.approx(expected.to_numpy())
    assert steps["flops_coverage"].gt(0.5).all()
    # synth kernel times are not scaled to any NPU: an impossible MFU is called out, never shown as fact
    implausible = json.loads((target / "model_insights.json").read_text())["limitations"]
    assert (steps["mfu"] > 1).any() == any("MFU above 1" in text for text in implausible)
    efficiency = pd.read_csv(target / schema.OPERATOR_EFFICIENCY_SUMMARY_CSV.file)
    cube = efficiency[efficiency["flops_kind"] == "cube"]
    assert cube["roofline_bound"].isin(["compute", "memory"]).all()
    assert (cube["reclaimable_us"] <= cube["duration_sum_us"] + 1e-6).all()


def test_bad_hardware_and_config_inputs_fail_with_one_line(tmp_path):
    unknown = run_cli(
        "analyze",
        str(QWEN_TRAINING),
        "-o",
        str(tmp_path / "a"),
        "--hardware-model",
        "Ascend999",
        "--progress",
        "none",
        "--to-stage",
        "model",
    )
    assert unknown.returncode != 0 and "Ascend999" in unknown.stderr and "Traceback" not in unknown.stderr
    broken = tmp_path / "peaks.json"
    broken.write_text('{"cube_tflops": ')
    bad = run_cli(
        "analyze",
        str(QWEN_TRAINING),
        "-o",
        str(tmp_path / "b"),
        "--hardware-profile",
        str(broken),
        "--progress",
        "none",
        "--to-stage",
        "model",
    )
    assert bad.returncode != 0 and "peaks.json" in bad.stderr and "Traceback" not in bad.stderr
    failure = json.loads((tmp_path / "b" / schema.FAILURE_JSON).read_text())
    assert failure["phase"] == "model"


def test_an_uneven_pipeline_split_counts_every_layer(planted_outputs):
    """pipeline_balanced splits its 6 layers 4 / 2 (the last stage makes room for the LM head): each
    stage's passes hold its own layers, and the model's layer count is their sum over the stages, not
    one stage's count times the stages (which made the ranks 'disagree' and left it unknown)."""
    _, out = planted_outputs["pipeline_balanced"]
    schedule = pd.read_csv(out / schema.PP_SCHEDULE_CSV.file)
    assert schedule.groupby("stage")["layers_held"].agg(lambda held: set(held)).to_dict() == {0: {4}, 1: {2}}
    fields = pd.read_csv(out / schema.MODEL_INFERRED_CONFIG_CSV.file).set_index("field")
    assert float(fields.loc["num_hidden_layers", "value"]) == SCENARIOS["pipeline_balanced"].layers
    assert fields.loc["num_hidden_layers", "confidence"] == "high"
    assert "summed over 2 pipeline stages" in fields.loc["num_hidden_layers", "method"]
