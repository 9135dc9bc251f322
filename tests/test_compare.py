"""npuprof compare on pairs of synth roots that differ by one planted change (and on a root against itself)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli

from npuprof.pipeline import schema
from npuprof.pipeline.compare.run import compare
from npuprof.pipeline.errors import UsageError
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.synth import generate
from npuprof.synth.faults import Fault
from npuprof.synth.scenarios import scenario

pytestmark = pytest.mark.xdist_group("compare")


def _analyzed(base: Path, name: str, planted) -> Path:
    root = Path(generate(base / f"{name}_root", planted, seed=3)["root"])
    analyze(root, base / f"{name}_out", jobs=2, stage_range=StageRange(to_stage="diagnostics"))
    return base / f"{name}_out"


def _pair(tmp_path: Path, baseline, new) -> tuple[Path, dict]:
    out = tmp_path / "cmp"
    compare(_analyzed(tmp_path, "base", baseline), _analyzed(tmp_path, "new", new), out)
    return out, json.loads((out / schema.COMPARE_SUMMARY).read_text())


def _read(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / name)


def test_attention_kernels_20_percent_faster_is_the_top_operator_and_block_gain(tmp_path):
    baseline = scenario("clean_inference")
    out, summary = _pair(tmp_path, baseline, replace(baseline, kernel_factors=(("FlashAttentionScore", 0.8),)))
    operators = _read(out, schema.COMPARE_OPERATORS)
    top = operators.iloc[0]
    assert top["type"] == "FlashAttentionScore" and top["status"] == "changed"
    assert top["median_ratio"] == pytest.approx(0.8, rel=0.05)
    assert top["per_step_delta_ms"] == pytest.approx(-0.2 * top["base_per_step_ms"], rel=0.05)
    assert (operators.iloc[1:]["status"] == "no_significant_change").all()  # nothing else moved
    blocks = _read(out, schema.COMPARE_BLOCK_CLASSES)
    changed_blocks = blocks[blocks["status"] == "changed"]
    assert set(changed_blocks["block_kind"]) == {"attention"} and (changed_blocks["per_step_delta_ms"] < 0).all()
    assert blocks.iloc[0]["block_kind"] == "attention"
    assert summary["headline"]["verdict"] == "faster"
    operator_gains = [m for m in summary["top_gains"] if m["level"] == "operator"]
    assert operator_gains[0]["what"]["type"] == "FlashAttentionScore"
    assert operator_gains[0]["evidence"]["baseline"] and operator_gains[0]["evidence"]["new"]
    # the step got faster by about what attention saved (every rank equally, so no one waits longer)
    wall = summary["headline"]["step_wall_ms"]
    assert wall["delta"] == pytest.approx(top["per_step_delta_ms"], rel=0.05)
    assert len((out / schema.COMPARE_SUMMARY).read_bytes()) <= 20_000
    assert "FlashAttentionScore" in (out / schema.COMPARE_MD).read_text()


def test_a_root_against_itself_shows_no_significant_change_anywhere(tmp_path):
    analyzed = _analyzed(tmp_path, "same", scenario("slow_rank"))
    out = tmp_path / "cmp"
    compare(analyzed, analyzed, out)
    summary = json.loads((out / schema.COMPARE_SUMMARY).read_text())
    assert summary["headline"]["verdict"] == "no significant change" and summary["headline"]["significant_changes"] == 0
    for name in (
        schema.COMPARE_STEP_CLASSES,
        schema.COMPARE_LAYER_CLASSES,
        schema.COMPARE_BLOCK_CLASSES,
        schema.COMPARE_OPERATORS,
        schema.COMPARE_COMMUNICATION,
    ):
        assert set(_read(out, name)["status"]) == {"no_significant_change"}, name
    assert _read(out, schema.COMPARE_OVERVIEW)["delta_ms"].abs().max() == 0
    assert summary["findings"]["appeared"] == [] and summary["findings"]["disappeared"] == []


def test_a_removed_host_bubble_shows_as_less_idle_on_its_rank_and_a_finding_gone(tmp_path):
    baseline = scenario("host_bubble")  # rank 0 idles 6 ms before layer 2 on steps 1 and 2
    out, summary = _pair(tmp_path, baseline, replace(baseline, faults=()))
    overview = _read(out, schema.COMPARE_OVERVIEW)
    overview["rank_id"] = overview["rank_id"].astype(str)
    idle_rows = overview[(overview["breakdown"] == "primary") & (overview["category"] == "idle")]
    idle = idle_rows[idle_rows["rank_id"] == "0"]["delta_ms"].sum()
    steps = len(json.loads((tmp_path / "base_root" / "ground_truth.json").read_text())["complete_steps"])
    assert idle == pytest.approx(-2 * 6.0 / steps, rel=0.05)  # 12 ms of planted idle over the complete steps
    # and the idle time by host cause says what went: the blocking sync the bubble was
    causes = overview[(overview["breakdown"] == "idle_by_cause") & (overview["rank_id"] == "0")].set_index("component")
    assert causes.loc["sync", "delta_ms"] == pytest.approx(-2 * 6.0 / steps, rel=0.05)
    others = idle_rows[(idle_rows["rank_id"] != "0") & (idle_rows["rank_id"] != "all")]
    assert others["delta_ms"].abs().max() < 0.05
    gone = summary["findings"]["disappeared"]  # the planted bubble's finding (see test_diagnostics' mapping)
    # the bubble is a blocking .item(): one finding, its device_idle_bubble merged into it
    assert sorted((f["finding_type"], f["rank_ids"]) for f in gone) == [("blocking_sync_in_step", [0])]
    assert [m["finding_type"] for m in gone[0]["merged"]] == ["device_idle_bubble"]
    assert summary["findings"]["appeared"] == []


def test_a_link_at_half_bandwidth_makes_its_all_reduce_the_top_communication_regression(tmp_path):
    baseline = replace(scenario("slow_link"), faults=())
    slower = replace(baseline, faults=(Fault("slow_link_suspected", link=(0, 1), factor=2.0),))
    out, summary = _pair(tmp_path, baseline, slower)
    comm = _read(out, schema.COMPARE_COMMUNICATION)
    top = comm.iloc[0]
    assert top["kind"] == "allreduce" and top["status"] == "changed" and top["per_step_delta_ms"] > 0
    assert summary["headline"]["verdict"] == "slower"


def test_a_slow_rank_shows_as_wait_on_its_peers_and_compute_on_itself_never_as_transmit(tmp_path):
    # rank 2 computes 1.6x slower: the others wait for it inside every all-reduce, but no byte moves
    # slower — communication.json's transit is the same on both sides (checked in the raw files). Both
    # sides sync gradients after the backward, so every all-reduce instance waits for rank 2 in full
    # (overlapped with the backward, the buckets queued behind the first wait less, and the per-instance
    # test sees a mixed sample)
    after_backward = Fault("gradient_allreduce_exposed")
    planted = scenario("slow_rank")
    planted = replace(planted, faults=(*planted.faults, after_backward))
    out, summary = _pair(tmp_path, replace(planted, faults=(after_backward,)), planted)

    def transit_ms(root: Path) -> float:
        total = 0.0
        for path in sorted(root.rglob("communication.json")):
            for step in json.loads(path.read_text()).values():
                for op in step.get("collective", {}).values():
                    total += op["Communication Time Info"]["Transit Time(ms)"]
        return total

    assert transit_ms(tmp_path / "base_root") == pytest.approx(transit_ms(tmp_path / "new_root"), rel=1e-6)
    comm = _read(out, schema.COMPARE_COMMUNICATION).set_index(["kind", "part"])
    assert comm.loc[("allreduce", "transmit"), "status"] == "no_significant_change"
    assert comm.loc[("allreduce", "transmit"), "split_source"] == "communication_json"
    wait = comm.loc[("allreduce", "wait")]
    assert wait["status"] == "changed" and wait["per_step_delta_ms"] > 0
    assert comm["per_step_delta_ms"].abs().idxmax() == ("allreduce", "wait")
    # per rank: the slow rank's compute grew; its peers' compute did not, their waiting did
    overview = _read(out, schema.COMPARE_OVERVIEW).astype({"rank_id": str})
    primary = overview[overview["breakdown"] == "primary"]
    compute = primary[primary["category"] == "compute"].groupby("rank_id")[["base_ms_per_step", "delta_ms"]].sum()
    assert compute.loc["2", "delta_ms"] == pytest.approx(0.6 * compute.loc["2", "base_ms_per_step"], rel=0.02)
    peers = compute.drop(["2", "all"])
    assert (peers["delta_ms"].abs() < 0.01 * peers["base_ms_per_step"]).all()
    first = summary["per_rank"][0]  # the summary names the rank that moved, not only all-rank medians
    assert first["rank"] == "2" and first["compute_delta_ms"] > 0 and abs(first["communication_delta_ms"]) < 0.1
    assert all(r["communication_delta_ms"] > 5 for r in summary["per_rank"][1:])  # its peers wait for it


def test_one_layers_wider_ffn_is_listed_as_a_structural_change_never_paired(tmp_path):
    baseline = scenario("clean_inference")
    out, summary = _pair(tmp_path, baseline, replace(baseline, wide_ffn_layers=(1,)))
    layers = _read(out, schema.COMPARE_LAYER_CLASSES)
    wide_layer = layers[layers["status"] == "only_in_new"]
    instances = 4 * 4  # layer 1 of every step (4) on every rank (4)
    assert len(wide_layer) == 1 and wide_layer.iloc[0]["new_count"] == instances
    shared = layers[layers["status"] != "only_in_new"].iloc[0]  # the class the other layers keep
    assert shared["base_count"] - shared["new_count"] == instances and shared["status"] == "no_significant_change"
    assert "only_in_baseline" not in set(layers["status"])  # layers 0, 2, 3 still run the old class
    operators = _read(out, schema.COMPARE_OPERATORS)
    wide = operators[operators["status"] == "only_in_new"]
    # gate-up matmul, SwiGlu and down matmul of the doubled width (per TP rank: 768 → 1536, gate-up 3072)
    assert sorted(wide["type"]) == ["MatMulV3", "MatMulV3", "SwiGlu"]
    assert wide["input_shapes"].str.contains("1536|3072").all()
    assert summary["only_on_one_side"][schema.COMPARE_LAYER_CLASSES] == 1


def test_captures_of_different_layer_counts_get_no_speed_verdict(tmp_path):
    # 6 layers take longer than 4 by construction: "slower" would be a wrong answer, not a finding
    baseline = scenario("clean_inference", steps=3)
    out, summary = _pair(tmp_path, baseline, replace(baseline, layers=6))
    assert summary["headline"]["verdict"] == "not comparable: decoder layers differ (4 vs 6)"
    assert summary["headline"]["step_wall_ms"]["delta"] > 0  # the walls are still shown, as walls
    assert "**not comparable: decoder layers differ (4 vs 6)**" in (out / schema.COMPARE_MD).read_text()


def test_captures_of_different_models_are_refused(tmp_path):
    dense = _analyzed(tmp_path, "dense", scenario("clean"))
    moe = _analyzed(tmp_path, "moe", scenario("mixed"))
    with pytest.raises(UsageError, match="different models"):
        compare(dense, moe, tmp_path / "cmp")
    run = run_cli("compare", str(dense), str(moe), "-o", str(tmp_path / "cli"), "--progress", "none")
    assert run.returncode == 2 and "hidden_size" in run.stderr and "Traceback" not in run.stderr


def test_the_cli_analyzes_roots_first_and_the_api_returns_the_same_tables(tmp_path):
    planted = scenario("clean_inference", steps=3)
    base = generate(tmp_path / "base_root", planted, seed=1)["root"]
    new = generate(tmp_path / "new_root", replace(planted, kernel_factors=(("SwiGlu", 1.5),)), seed=1)["root"]
    run = run_cli("compare", base, new, "-o", str(tmp_path / "cmp"), "--progress", "none", timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.result["verdict"] == "slower"
    assert (tmp_path / "cmp" / "baseline" / "summary_manifest.json").exists()
    from npuprof.api.analysis import Analysis

    tables = Analysis(tmp_path / "cmp" / "baseline").compare(tmp_path / "cmp" / "new")
    operators = tables[schema.COMPARE_OPERATORS]
    assert operators.iloc[0]["type"] == "SwiGlu" and operators.iloc[0]["median_ratio"] == pytest.approx(1.5, rel=0.05)
    written = _read(tmp_path / "cmp", schema.COMPARE_OPERATORS)
    assert list(written["name"]) == list(operators["name"])


def test_a_sweep_is_ranked_against_its_baseline_root(tmp_path):
    from npuprof.pipeline.sweep.local import run_sweep

    planted = scenario("clean_inference", steps=3)
    search = tmp_path / "search"
    generate(search / "base", planted, seed=2)
    generate(search / "fast_attention", replace(planted, kernel_factors=(("FlashAttentionScore", 0.8),)), seed=2)
    generate(search / "slow_swiglu", replace(planted, kernel_factors=(("SwiGlu", 1.3),)), seed=2)
    generate(search / "moe", scenario("ep_imbalance", steps=3), seed=2)
    archive = tmp_path / "archive"
    run_sweep([str(search)], str(archive), jobs=2)
    run = run_cli(
        "compare",
        "--sweep",
        str(archive),
        "--baseline",
        "base",
        "-o",
        str(tmp_path / "cmp"),
        "--progress",
        "none",
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    rollup = pd.read_csv(tmp_path / "cmp" / schema.SWEEP_ROLLUP)
    rows = rollup.set_index(rollup["root"].map(lambda r: Path(r).name))
    assert rows.loc["base", "compare_status"] == "baseline"
    assert rows.loc["moe", "compare_status"].startswith("different model")
    assert rows.loc["fast_attention", "step_wall_ms_delta"] < 0 < rows.loc["slow_swiglu", "step_wall_ms_delta"]
    assert "FlashAttentionScore" in rows.loc["fast_attention", "top_gain"]
    assert "SwiGlu" in rows.loc["slow_swiglu", "top_regression"]
    series = pd.read_csv(tmp_path / "cmp" / schema.COMPARE_SERIES)
    assert set(series["root"].map(lambda r: Path(r).name)) == {"fast_attention", "slow_swiglu"}
    top = series[(series["level"] == "operator") & (series["root"].str.endswith("fast_attention"))].iloc[0]
    assert "FlashAttentionScore" in top["item"] and top["median_ratio"] == pytest.approx(0.8, rel=0.05)
    bad = run_cli("compare", "--sweep", str(archive), "--baseline", "nope", "-o", str(tmp_path / "x"))
    assert bad.returncode == 2 and "not a root of this sweep" in bad.stderr


def test_two_one_step_captures_are_not_testable_not_unchanged(sample_outputs, tmp_path):
    """The real CNN captures hold one step each: with no spread to test against, a step wall that moved is
    'not testable', never 'no significant change'."""
    base, _ = sample_outputs["text_level1"]
    new, _ = sample_outputs["text_level2"]
    headline = compare(base, new, tmp_path / "cmp")
    verdict = headline["verdict"]
    assert headline["significant_changes"] == 0 and headline["step_wall_ms"]["delta"] != 0
    assert verdict.startswith("not testable: 1 complete step(s) in the baseline and 1 in the new"), verdict
