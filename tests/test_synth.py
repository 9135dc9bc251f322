"""synth: every scenario generates, the physics hold, and planted faults have their planted size."""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from npuprof.api import Analysis
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.stage_range import StageRange
from npuprof.synth import SCENARIOS, generate
from npuprof.synth.faults import UNCAPTURED

# what these tests read is the normalized events: the later stages are the planted outputs' to run
EVENTS_ONLY = StageRange(to_stage="normalize")

pytestmark = pytest.mark.xdist_group("synth")  # one worker: shares its fixtures


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("synth")
    return {name: Path(generate(base / name, name, seed=7)["root"]) for name in SCENARIOS}


def truth(root: Path) -> dict:
    return json.loads((root / "ground_truth.json").read_text())


def kernel_rows(root: Path, rank: int) -> pd.DataFrame:
    path = (
        next(root.glob(f"*_ascend_pt/profiler_info_{rank}.json")).parent
        / "ASCEND_PROFILER_OUTPUT"
        / "kernel_details.csv"
    )
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame["start_ns"] = frame["Start Time(us)"].str.strip().str.replace(".", "", regex=False).astype("int64")
    frame["dur_us"] = frame["Duration(us)"].astype(float)
    frame["end_ns"] = frame["start_ns"] + (frame["dur_us"] * 1000).round().astype("int64")
    return frame


def comm_json(root: Path, rank: int, name: str = "communication.json") -> dict:
    return json.loads(
        (next(root.glob(f"*_ascend_pt/profiler_info_{rank}.json")).parent / "ASCEND_PROFILER_OUTPUT" / name).read_text()
    )


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_generates_a_root_npuprof_reads_whole(roots, tmp_path, name):
    root = roots[name]
    gt = truth(root)
    assert gt["scenario"] == name and gt["faults"] == [
        f.as_dict() | ({"step_ids": gt["faults"][i]["step_ids"]} if "step_ids" in gt["faults"][i] else {})
        for i, f in enumerate(SCENARIOS[name].faults)
    ]
    uncaptured = {r for f in SCENARIOS[name].faults if f.kind in UNCAPTURED for r in f.ranks}
    assert set(gt["ranks"]) == {str(r) for r in range(SCENARIOS[name].ranks) if r not in uncaptured}
    for key in ("step_ids", "complete_steps", "expected_findings", "unexpected_findings", "model", "workload"):
        assert key in gt
    result = analyze(root, tmp_path / "out", jobs=1, stage_range=EVENTS_ONLY)
    assert result["event_count"] == sum(r["event_count"] for r in gt["ranks"].values())
    step_ids = Analysis(tmp_path / "out").events()["step_id"]
    if gt.get("layout") == "serving":  # a serving capture's forwards: no row carries a step id
        assert step_ids.isna().all() and not SCENARIOS[name].step_marks
    else:
        assert set(step_ids.unique()) <= set(gt["step_ids"])


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    def digest(root: Path) -> str:
        h = hashlib.sha256()
        for p in sorted(root.rglob("*")):
            if p.is_file():
                h.update(p.relative_to(root).as_posix().encode())
                h.update(p.read_bytes())
        return h.hexdigest()

    a = digest(Path(generate(tmp_path / "a", "mixed", seed=3)["root"]))
    b = digest(Path(generate(tmp_path / "b", "mixed", seed=3)["root"]))
    c = digest(Path(generate(tmp_path / "c", "mixed", seed=4)["root"]))
    assert a == b != c


def test_collectives_end_together_and_early_ranks_wait(roots):
    root = roots["slow_rank"]
    frames = {r: kernel_rows(root, r) for r in range(4)}
    hcom = {r: f[f["Name"].str.startswith("hcom_")].set_index("Name") for r, f in frames.items()}
    names = hcom[0].index
    assert all(list(h.index) == list(names) for h in hcom.values()), (
        "a collective has the same op sequence on every rank"
    )
    ends = np.array([hcom[r].loc[names, "end_ns"].to_numpy() for r in range(4)])
    assert (ends.max(axis=0) - ends.min(axis=0)).max() < 5_000  # within 5 µs
    durations = np.array([hcom[r].loc[names, "dur_us"].to_numpy() for r in range(4)])
    first = durations[:, 0]
    assert np.argmin(first) == 2, "the slow rank arrives last, so it waits least"
    waits = {r: comm_json(root, r)["step10"]["collective"] for r in range(4)}
    op = next(k for k in waits[0] if not k.startswith("Total"))
    assert waits[2][op]["Communication Time Info"]["Wait Time(ms)"] == pytest.approx(0.0, abs=0.01)
    assert all(waits[r][op]["Communication Time Info"]["Wait Time(ms)"] > 1.0 for r in (0, 1, 3))


def test_slow_rank_computes_by_the_planted_factor(roots):
    root = roots["slow_rank"]
    factor = truth(root)["faults"][0]["factor"]
    slow, normal = kernel_rows(root, 2), kernel_rows(root, 0)
    compute = ~slow["Name"].str.startswith("hcom_")
    ratio = np.median(slow.loc[compute, "dur_us"].to_numpy() / normal.loc[compute, "dur_us"].to_numpy())
    assert ratio == pytest.approx(factor, rel=0.03)


def test_the_ep_hot_rank_gets_more_tokens_and_others_wait_in_combine(roots, tmp_path):
    root = roots["ep_imbalance"]
    factor = truth(root)["faults"][0]["factor"]
    hot, cold = kernel_rows(root, 1), kernel_rows(root, 0)
    gmm_hot = hot[hot["Type"] == "GroupedMatmul"]
    gmm_cold = cold[cold["Type"] == "GroupedMatmul"]
    assert np.median(gmm_hot["dur_us"].to_numpy() / gmm_cold["dur_us"].to_numpy()) == pytest.approx(factor, rel=0.05)
    m_hot = gmm_hot["Input Shapes"].str.strip('"').str.split(",").str[0].astype(int)
    m_cold = gmm_cold["Input Shapes"].str.strip('"').str.split(",").str[0].astype(int)
    np.testing.assert_allclose(m_hot.to_numpy() / m_cold.to_numpy(), factor, rtol=1e-3)
    # the router sends the same tokens as in the balanced twin, unevenly: the group's total is unchanged
    even = Path(generate(tmp_path / "even", replace(SCENARIOS["ep_imbalance"], faults=()), seed=0)["root"])
    routed = [
        kernel_rows(r, rank).query("Type == 'GroupedMatmul'")["Input Shapes"].str.strip('"').str.split(",").str[0]
        for r in (root, even)
        for rank in range(4)
    ]
    totals = [sum(int(m.iloc[0]) for m in routed[:4]), sum(int(m.iloc[0]) for m in routed[4:])]
    assert totals[0] == pytest.approx(totals[1], abs=4)
    combine_hot = hot.loc[hot["Type"] == "MoeDistributeCombine", "dur_us"].median()
    combine_cold = cold.loc[cold["Type"] == "MoeDistributeCombine", "dur_us"].median()
    # the others wait in combine for the hot rank's longer expert block (its two grouped matmuls, the
    # second half the first)
    extra_expert_us = 1.5 * (gmm_hot["dur_us"].median() - gmm_cold["dur_us"].median())
    assert combine_cold - combine_hot > 0.8 * extra_expert_us, "ranks that finish early wait in combine"


def test_host_bubble_sits_before_the_planted_layer_on_the_planted_steps(roots):
    root = roots["host_bubble"]
    fault = truth(root)["faults"][0]
    frame = kernel_rows(root, fault["ranks"][0])
    wait_us = frame["Wait Time(us)"].astype(float)
    big = frame[wait_us > fault["gap_us"] * 0.9]
    assert sorted(big["Step Id"].astype(int)) == fault["step_ids"]
    assert (big["Type"] == "RmsNorm").all()  # the first kernel of a dense layer
    other = kernel_rows(root, 1)
    assert other["Wait Time(us)"].astype(float).max() < fault["gap_us"] * 0.5


def test_slow_link_shows_in_the_matrix_bandwidth(roots):
    root = roots["slow_link"]
    factor = truth(root)["faults"][0]["factor"]
    matrix = comm_json(root, 0, "communication_matrix.json")["step10"]["collective"]
    key = next(k for k in matrix if k.startswith("allreduce-top1"))
    slow_bw = matrix[key]["0-1"]["Bandwidth(GB/s)"]
    other = comm_json(root, 1, "communication_matrix.json")["step10"]["collective"][key]["1-2"]["Bandwidth(GB/s)"]
    assert other / slow_bw == pytest.approx(factor, rel=0.05)
    assert matrix[key]["0-0"]["Transport Type"] == "LOCAL"  # self links, as msprof-analyze needs


def test_the_planted_aicpu_op_is_there_with_its_size(roots, tmp_path):
    root = roots["exposed_aicpu"]
    fault = truth(root)["faults"][0]
    analyze(root, tmp_path / "o", jobs=1, stage_range=EVENTS_ONLY)
    events = Analysis(tmp_path / "o").events()
    aicpu = events[events["op_type"] == "aicpu"]
    assert len(aicpu) == SCENARIOS["exposed_aicpu"].steps * SCENARIOS["exposed_aicpu"].ranks
    assert aicpu["duration_ns"].median() / 1000 == pytest.approx(fault["gap_us"], rel=0.1)


def test_reduced_work_rank_routes_no_tokens(roots):
    root = roots["dummy_rank"]
    rank = truth(root)["faults"][0]["ranks"][0]
    gmm = kernel_rows(root, rank)
    gmm = gmm[gmm["Type"] == "GroupedMatmul"]
    assert (gmm["Input Shapes"].str.strip('"').str.split(",").str[0] == "0").all()
    assert gmm["dur_us"].max() < 5


def test_partial_capture_cuts_the_first_and_last_step(roots):
    root = roots["partial_capture"]
    gt = truth(root)
    frame = kernel_rows(root, 0)
    per_step = frame["Step Id"].astype(int).value_counts()
    complete = per_step[gt["complete_steps"]]
    assert complete.nunique() == 1
    for step in (gt["step_ids"][0], gt["step_ids"][-1]):
        assert per_step[step] < 0.7 * complete.iloc[0]
    assert gt["ranks"]["0"]["partial_steps"] == [gt["step_ids"][0], gt["step_ids"][-1]]


def test_clock_offset_shifts_one_rank_only(roots):
    root = roots["mixed"]
    offset_us = next(f for f in truth(root)["faults"] if f["kind"] == "clock_offset")["offset_us"]
    ends = {r: kernel_rows(root, r) for r in (0, 2)}
    hcom = {r: f[f["Name"].str.startswith("hcom_")].set_index("Name")["end_ns"] for r, f in ends.items()}
    delta_us = (hcom[2] - hcom[0].loc[hcom[2].index]).median() / 1000
    assert delta_us == pytest.approx(offset_us, abs=5)


def test_pipeline_fields_add_up_and_fit_in_the_duration(roots, tmp_path):
    analyze(roots["clean"], tmp_path / "o", jobs=1, stage_range=EVENTS_ONLY)
    events = Analysis(tmp_path / "o").events()
    compute = events[events["op_type"].isin(["aic", "aiv", "mix_cv"])]
    aic_stages = compute[
        ["aic_mac_time_us", "aic_mte1_time_us", "aic_mte2_time_us", "aic_fixpipe_time_us", "aic_scalar_time_us"]
    ].sum(axis=1)
    aiv_stages = compute[["aiv_vec_time_us", "aiv_mte2_time_us", "aiv_mte3_time_us", "aiv_scalar_time_us"]].sum(axis=1)
    assert (aic_stages <= compute["aicore_time_us"] + 0.01).all()
    assert (aiv_stages <= compute["aiv_time_us"] + 0.01).all()
    assert (compute["aicore_time_us"] <= compute["duration_ns"] / 1000 + 0.01).all()
    cube = compute[compute["type"] == "MatMulV3"]
    assert (cube["aic_mac_time_us"] > cube["aic_mte2_time_us"]).mean() > 0.4  # matmuls are mostly cube bound


def test_synthetic_kernels_classify_like_real_ones(roots, tmp_path):
    analyze(roots["mixed"], tmp_path / "moe", jobs=1, stage_range=EVENTS_ONLY)
    analyze(roots["ep_imbalance"], tmp_path / "moe_inf", jobs=1, stage_range=EVENTS_ONLY)
    analyze(roots["clean"], tmp_path / "dense", jobs=1, stage_range=EVENTS_ONLY)
    moe = set(Analysis(tmp_path / "moe").events()["categories"].explode().dropna())
    dense = set(Analysis(tmp_path / "dense").events()["categories"].explode().dropna())
    assert {
        "attention.mla",
        "moe.gating",
        "moe.expert_matmul",
        "communication.alltoallv",
        "optimizer.update",
        "training.backward",
    } <= moe
    assert {
        "attention.flash_score",
        "ffn.activation",
        "normalization",
        "attention.rope",
        "communication.allreduce",
    } <= dense
    inference = Analysis(tmp_path / "moe_inf").events()
    assert set(inference.loc[inference["type"].str.startswith("MoeDistribute"), "op_type"]) == {"mix_comm_aiv"}


def test_training_steps_hold_forward_and_backward_layers_per_micro_batch(roots):
    root = roots["clean"]
    gt = truth(root)
    sc = SCENARIOS["clean"]
    assert gt["ranks"]["0"]["layer_instances_per_complete_step"] == {
        "forward": sc.layers * sc.micro_batches,
        "backward": sc.layers * sc.micro_batches,
    }
    frame = kernel_rows(root, 0)
    step = frame[frame["Step Id"] == str(gt["complete_steps"][0])]
    assert (step["Type"] == "FlashAttentionScore").sum() == sc.layers * sc.micro_batches
    assert (step["Type"] == "FlashAttentionScoreGrad").sum() == sc.layers * sc.micro_batches
    assert (step["Type"] == "ApplyAdamWV2").sum() > 0


def test_a_text_root_holds_no_db_and_every_rank_has_the_vendor_files(roots):
    root = roots["clean"]
    assert not list(root.rglob("*.db"))
    for rank_dir in root.glob("*_ascend_pt"):
        output = rank_dir / "ASCEND_PROFILER_OUTPUT"
        for name in ("kernel_details.csv", "step_trace_time.csv", "communication.json", "communication_matrix.json"):
            assert (output / name).is_file(), name
        assert len(list(rank_dir.glob("profiler_info_*.json"))) == 1
        metadata = json.loads((rank_dir / "profiler_metadata.json").read_text())
        assert metadata["distributed_args"]["world_size"] == 4
        with open(output / "kernel_details.csv", newline="") as handle:
            header = next(csv.reader(handle))
        assert len(header) == 47


def test_db_and_text_exports_of_one_root_normalize_to_the_same_events(tmp_path):
    root = Path(generate(tmp_path / "both", "ep_imbalance", seed=2, export="both")["root"])
    assert len(list(root.rglob("ascend_pytorch_profiler_*.db"))) == 4 and len(list(root.rglob("analysis.db"))) == 4
    from npuprof.pipeline.options import AnalyzeOptions

    analyze(root, tmp_path / "db", jobs=1, options=AnalyzeOptions(source="db"), stage_range=EVENTS_ONLY)
    analyze(root, tmp_path / "csv", jobs=1, options=AnalyzeOptions(source="csv"), stage_range=EVENTS_ONLY)
    db = Analysis(tmp_path / "db").events().sort_values(["rank_id", "start_ns"]).reset_index(drop=True)
    text = Analysis(tmp_path / "csv").events().sort_values(["rank_id", "start_ns"]).reset_index(drop=True)
    assert {r["source_kind"] for r in Analysis(tmp_path / "db").manifest("normalize")["rank_summaries"]} == {
        "profiler_db"
    }
    for column in ("name", "type", "accelerator_core", "op_type", "start_ns", "duration_ns", "step_id", "input_shapes"):
        pd.testing.assert_series_equal(
            db[column].astype(object).where(db[column].notna(), None),
            text[column].astype(object).where(text[column].notna(), None),
            check_names=False,
        )
    for column in ("aicore_time_us", "aiv_time_us", "aic_mac_time_us", "aiv_mte2_time_us", "block_dim"):
        np.testing.assert_allclose(db[column].astype(float), text[column].astype(float), rtol=1e-9, equal_nan=True)


def test_trace_view_is_a_chrome_trace_with_the_exporter_quirks(roots):
    root = roots["host_bubble"]
    fault = truth(root)["faults"][0]
    rank_dir = next(root.glob(f"*_ascend_pt/profiler_info_{fault['ranks'][0]}.json")).parent
    events = json.loads((rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    assert isinstance(events, list)
    processes = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"Python", "CANN", "Ascend Hardware", "HCCL", "Overlap Analysis"} <= set(processes)
    timed = [e for e in events if "ts" in e]
    assert all(isinstance(e["ts"], str) and len(e["ts"].split(".")[1]) == 3 for e in timed)
    kernels = kernel_rows(root, fault["ranks"][0])
    device = [
        e
        for e in events
        if e["ph"] == "X"
        and e["pid"] in (processes["Ascend Hardware"], processes["HCCL"])
        and e.get("tid") in (0, 2)
        and e["name"] != "Memcpy"
    ]
    assert sorted(e["ts"] for e in device) == sorted(kernels["Start Time(us)"].str.strip())
    starts = {e["id"] for e in events if e["ph"] == "s" and e.get("cat") == "async_npu"}
    finishes = {e["id"] for e in events if e["ph"] == "f" and e.get("cat") == "async_npu"}
    assert starts == finishes and len(starts) == len(kernels)
    syncs = [e for e in events if e["name"] == "aten::item"]
    assert len(syncs) == len(fault["step_ids"])
    assert all(e["dur"] == pytest.approx(fault["gap_us"], rel=0.01) for e in syncs)
    assert any(e["name"] == "AscendCL@aclrtSynchronizeStream" for e in events)


def test_pipeline_stages_hold_their_layers_and_exchange_with_send_recv(roots):
    root = roots["pipeline_parallel"]
    gt = truth(root)
    sc = SCENARIOS["pipeline_parallel"]
    per_stage = sc.layers // sc.pp
    for rank, facts in gt["ranks"].items():
        stage = int(rank) // (sc.ranks // sc.pp)
        assert facts["decoder_layers_held"] == list(range(stage * per_stage, (stage + 1) * per_stage))
        assert facts["layer_instances_per_complete_step"] == {
            "forward": per_stage * sc.micro_batches,
            "backward": per_stage * sc.micro_batches,
        }
    first, last = kernel_rows(root, 0), kernel_rows(root, 2)  # ranks 0 and 2 form one pp group
    assert (first["Type"] == "GatherV2").any() and not (
        last["Type"] == "GatherV2"
    ).any()  # embedding on the first stage
    assert (last["Type"] == "CrossEntropyLoss").any() and not (
        first["Type"] == "CrossEntropyLoss"
    ).any()  # loss on the last
    p2p = {r: f[f["Type"] == "hcom_batchSendRecv_"].set_index("Name") for r, f in ((0, first), (2, last))}
    assert list(p2p[0].index) == list(p2p[2].index) and len(p2p[0]) == 2 * sc.micro_batches * sc.steps
    ends = np.abs(p2p[0]["end_ns"].to_numpy() - p2p[2]["end_ns"].to_numpy())
    assert ends.max() < 5_000  # a send/recv pair ends together on both stages
    communication = comm_json(root, 0)["step10"]
    assert communication["p2p"] and all(
        k.startswith("hcom_batchSendRecv_") or k == "Total Op Info" for k in communication["p2p"]
    )
