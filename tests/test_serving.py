"""Serving captures (issue 69): a capture without profiler steps — vLLM-Ascend's /start_profile …
/stop_profile runs no schedule, so kernel_details.csv has no Step Id and step_trace_time.csv one
whole-capture row per device with an empty Step — analyzes with status ok, each forward found from the
kernels as the steps the same capture with step markers has."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from npuprof.pipeline import schema
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.stages.segment.forwards import batch_of
from npuprof.synth import SCENARIOS, generate
from npuprof.synth.scenarios import scenario
from npuprof.synth.serving import TOKEN_BUDGET

# one worker runs the module: its module fixture is built once (xdist would build it again on each
# worker a test of it lands on, and again whenever modules interleave there)
pytestmark = pytest.mark.xdist_group("serving")

# a clean eager decode with tensor parallel all-reduces: launch_bound without its fault
DECODE = replace(SCENARIOS["launch_bound"], name="serving_decode", faults=())


@pytest.fixture(scope="module")
def both_layouts(tmp_path_factory) -> dict[str, tuple]:
    """The same decode capture (seed, shapes) written as a serving capture and with step markers,
    each analyzed: {layout: (root, out, result)}."""
    base = tmp_path_factory.mktemp("serving")
    found = {}
    for layout, serving in (("serving", True), ("marked", False)):
        root = base / f"{layout}_root"
        generate(root, DECODE, seed=3, serving=serving)
        found[layout] = (root, base / f"{layout}_out", analyze(root, base / f"{layout}_out", jobs=1))
    return found


def test_the_serving_layout_is_what_vllm_ascend_leaves(both_layouts):
    root, _, _ = both_layouts["serving"]
    for rank_dir in sorted(root.glob("*_ascend_pt")):
        output = rank_dir / "ASCEND_PROFILER_OUTPUT"
        assert "Step Id" not in pd.read_csv(output / "kernel_details.csv", nrows=1).columns
        split = pd.read_csv(output / "step_trace_time.csv", dtype=str, keep_default_na=False)
        assert len(split) == 1 and split["Step"].tolist() == [""]
        assert "ProfilerStep#" not in (output / "trace_view.json").read_text()
        # torch_npu re-splits CANN's records by step: without one, everything sits under "step"
        for name in ("communication.json", "communication_matrix.json"):
            assert list(json.loads((output / name).read_text())) == ["step"]
    assert json.loads((root / "ground_truth.json").read_text())["layout"] == "serving"


def test_the_collectives_of_a_capture_without_steps_are_split_as_the_marked_ones(both_layouts):
    """communication.json's one "step" key is matched to the forwards' collectives by name: each exposed
    all-reduce splits into transfer / wait / idle exactly as the same capture's with step markers (it
    once failed the summarize stage on mismatched key types)."""
    parts = {}
    for layout in ("serving", "marked"):
        ledger = pd.read_csv(both_layouts[layout][1] / schema.STEP_LEDGER_CSV.file)
        comm = ledger[ledger["category"] == "communication"]
        parts[layout] = comm.groupby(["rank_id", "line"])["ms"].sum()
    assert not parts["serving"].index.get_level_values("line").str.endswith("unsplit").any()
    assert parts["serving"].index.equals(parts["marked"].index)
    np.testing.assert_allclose(parts["serving"].to_numpy(), parts["marked"].to_numpy(), rtol=1e-6, atol=1e-6)


def test_a_capture_without_step_markers_is_ok_and_its_forwards_are_the_marked_steps(both_layouts):
    _, out, result = both_layouts["serving"]
    marked_root, marked_out, _ = both_layouts["marked"]
    assert result["status"] == "ok", result.get("warnings")
    assert not result.get("warnings")
    steps = pd.read_parquet(out / schema.STEP_SEGMENTS.path)
    marked = pd.read_parquet(marked_out / schema.STEP_SEGMENTS.path)
    assert steps["step_id"].isna().all() and (steps["source"] == "structure").all()
    truth = json.loads((marked_root / "ground_truth.json").read_text())
    for rank, facts in truth["ranks"].items():
        own = steps[steps["rank_id"] == int(rank)].sort_values("step_ordinal")
        theirs = marked[marked["rank_id"] == int(rank)].sort_values("step_ordinal")
        assert len(own) == len(facts["complete_steps"]) == DECODE.steps
        # the same rows in each forward as in each marked step, every layer of it found
        assert own[["row_start", "row_end"]].values.tolist() == theirs[["row_start", "row_end"]].values.tolist()
        assert (own["forward_layers"] == facts["layer_instances_per_complete_step"]["forward"]).all()
        assert own["complete"].all()


# --- forwards labelled from their attention calls (the serving scenario: synth/serving.py) ---------------


@pytest.fixture(scope="module")
def serving_run(tmp_path_factory) -> tuple:
    """The serving scenario (prefill, decodes, chunked prefills; no step markers) analyzed: (root, out,
    result, ground truth)."""
    base = tmp_path_factory.mktemp("forwards")
    root = base / "root"
    generate(root, SCENARIOS["serving"], seed=5, serving=True)
    result = analyze(root, base / "out", jobs=1)
    return root, base / "out", result, json.loads((root / "ground_truth.json").read_text())


def test_the_serving_scenario_runs_every_kind_of_forward(serving_run):
    forwards = SCENARIOS["serving"].forwards
    assert {(f.phase, f.graph) for f in forwards} == {
        ("prefill", "eager"),
        ("decode", "full"),
        ("mixed", "piecewise"),
        ("mixed", "eager"),
    }
    assert all(f.tokens == f.requests for f in forwards if f.phase == "decode")
    assert all(f.tokens > f.requests for f in forwards if f.phase != "decode")
    assert all(f.tokens <= TOKEN_BUDGET for f in forwards)
    with pytest.raises(ValueError, match="forwards"):
        scenario("serving", steps=3)
    # a replayed kernel carries its graph's Model ID and a static OP State; the LM head and sampling run
    # eager after the replay (CANN's Model ID of an eager launch is UINT32 max)
    root = serving_run[0]
    details = next(root.glob("*_ascend_pt")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    kernels = pd.read_csv(details, dtype=str, keep_default_na=False)
    replayed = kernels["Model ID"] != "4294967295"
    assert replayed.any() and (kernels.loc[replayed, "OP State"] == "static").all()
    vocabulary_shard = 151936 // SCENARIOS["serving"].ranks  # the LM head's output, split over TP
    tail = kernels["Type"].eq("ArgMaxWithValue") | kernels["Output Shapes"].str.strip('"').str.endswith(
        f",{vocabulary_shard}"
    )
    assert tail.sum() == 2 * len(forwards) and not replayed[tail].any()


def test_every_forward_is_labelled_with_its_tokens_and_requests(serving_run):
    root, out, result, truth = serving_run
    assert result["status"] == "ok" and truth["layout"] == "serving"
    planted = pd.DataFrame(truth["workload"]["forwards"])
    found = pd.read_parquet(out / schema.FORWARD_SUMMARY.path)
    for rank in truth["ranks"]:
        own = found[found["rank_id"].astype(int) == int(rank)].sort_values("step_ordinal")
        assert len(own) == len(planted)
        for column in ("phase", "tokens", "requests"):
            assert own[column].tolist() == planted[column].tolist(), column
        # how each ran, from its kernels' Model ID: FULL decodes, PIECEWISE small mixed batches, the rest eager
        assert own["graph_mode"].tolist() == planted["graph"].tolist()
        assert (own.loc[own["graph_mode"] == "eager", "graph_kernels"] == 0).all()
        # a full graph ran its layers padded to its captured size: the real batch is what the LM head sampled
        full = (planted["graph"] == "full").to_numpy()
        padding = (planted["graph_tokens"] - planted["tokens"]).to_numpy()
        assert own["padded_tokens"].to_numpy()[full].tolist() == padding[full].tolist()
        assert own["padded_tokens"][~full].isna().all() and (padding[full] > 0).any()
        # the rows that say so are the forward's attention calls, one per layer, inside the forward
        assert (own["attention_calls"] == SCENARIOS["serving"].layers).all()
        assert (own["evidence_row_start"] >= own["row_start"]).all()
        assert (own["evidence_row_end"] <= own["row_end"]).all()


def test_wall_percentiles_per_phase_are_the_forwards_device_spans(serving_run):
    _, out, _, truth = serving_run
    phases = [f["phase"] for f in truth["workload"]["forwards"]]
    view = json.loads((out / "report" / "analysis_summary.json").read_text())["serving"]
    for phase in ("decode", "mixed"):
        spans = [
            span for facts in truth["ranks"].values() for p, span in zip(phases, facts["forward_span_us"]) if p == phase
        ]
        assert view["phases"][phase]["forwards"] == len(spans)
        for q in (50, 99):
            assert view["phases"][phase][f"wall_p{q}_ms"] == pytest.approx(np.percentile(spans, q) / 1e3, rel=0.02)
    assert view["unlabelled"]["forwards"] == 0
    full = [f for f in SCENARIOS["serving"].forwards if f.graph == "full"]
    assert view["phases"]["decode"]["padded_tokens"] == len(truth["ranks"]) * sum(
        f.graph_tokens - f.tokens for f in full
    )
    report = (out / "report" / "report.md").read_text()
    assert "Forwards by phase" in report and "| decode |" in report and "padded\\_tokens" in report


def test_a_clean_serving_capture_reports_no_finding(serving_run):
    _, out, _, truth = serving_run
    assert truth["expected_findings"] == []
    found = json.loads((out / "diagnosis_findings.json").read_text())["diagnosis_findings"]
    assert [f["finding_type"] for f in found] == []


def test_forwards_whose_attention_lacks_shapes_are_counted_not_guessed(serving_run, tmp_path):
    """Graph kernels exported without shapes (older CANN): the forwards of that rank are found, and said
    to be unlabelled and why; no batch is guessed."""
    root, _, _, truth = serving_run
    copy = tmp_path / "root"
    shutil.copytree(root, copy)
    rank_dir = next(path.parent for path in copy.glob("*_ascend_pt/profiler_info_1.json"))
    details = rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    kernels = pd.read_csv(details, dtype=str, keep_default_na=False)
    kernels.loc[kernels["Type"] == "FusedInferAttentionScore", "Input Shapes"] = ""
    kernels.to_csv(details, index=False)
    result = analyze(copy, tmp_path / "out", jobs=1)
    assert result["status"] == "ok"
    found = pd.read_parquet(tmp_path / "out" / schema.FORWARD_SUMMARY.path)
    blind = found[found["rank_id"].astype(int) == 1]
    assert (blind["phase"] == "unknown").all() and blind["tokens"].isna().all() and blind["requests"].isna().all()
    assert (found[found["rank_id"].astype(int) == 0]["phase"] != "unknown").all()
    view = json.loads((tmp_path / "out" / "report" / "analysis_summary.json").read_text())["serving"]
    forwards = len(truth["workload"]["forwards"])
    assert view["unlabelled"] == {"forwards": forwards, "why": {"no 3-D query shape": forwards}}


@pytest.mark.parametrize(
    ("shapes", "read"),
    [
        # TND decode over the paged cache: T = B, block table in slot 14
        ("8,16,128;4096,128,1024;4096,128,1024;;;8;8;;;;;;;;8,256", ("decode", 8, 8)),
        # a chunked prefill: T > B over the paged cache
        ("700,16,128;4096,128,1024;4096,128,1024;;2048,2048;3;3;;;;;;;;3,256", ("mixed", 700, 3)),
        # whole prompts over their own keys and values: no block table
        ("2048,16,128;2048,8,128;2048,8,128;;2048,2048;4;4", ("prefill", 2048, 4)),
        # BSH decode: [B, 1, H], the requests are the query's first dim
        ("6,1,2048;4096,128,512;4096,128,512;;;;6;;;;;;;;6,256", ("decode", 6, 6)),
        # no sequence lengths: the tokens are read, the requests are not, so no phase
        ("4096,16,128;4096,8,128;4096,8,128", ("unknown", 4096, None)),
        ("", ("unknown", None, None)),
    ],
)
def test_an_attention_calls_slots_say_its_batch(shapes, read):
    assert batch_of(shapes)[:3] == read


# --- dummy forwards of a data-parallel rank without requests (serving_dp) ---------------------------------


@pytest.fixture(scope="module")
def dp_runs(tmp_path_factory) -> dict[str, tuple]:
    """serving_dp written as served (no step marks) and with step marks, each analyzed: {layout: (root,
    out, result)}."""
    base = tmp_path_factory.mktemp("dp")
    runs = {}
    for layout, serving in (("serving", True), ("marked", False)):
        root = base / f"{layout}_root"
        generate(root, SCENARIOS["serving_dp"], seed=4, serving=serving)
        runs[layout] = (root, base / f"{layout}_out", analyze(root, base / f"{layout}_out", jobs=1))
    return runs


def test_a_dummy_forward_is_its_own_forward_not_part_of_the_next(dp_runs):
    """Nothing samples a dummy forward, so the sampling that ends a forward does not end it: it is cut from
    the forward it joined at the host's gap, and the forwards are the marked capture's steps, row for row."""
    _, out, result = dp_runs["serving"]
    _, marked_out, _ = dp_runs["marked"]
    assert result["status"] == "ok"
    found = pd.read_parquet(out / schema.STEP_SEGMENTS.path)
    marked = pd.read_parquet(marked_out / schema.STEP_SEGMENTS.path)
    for rank in (0, 1):
        own = found[found["rank_id"].astype(int) == rank].sort_values("step_ordinal")
        theirs = marked[marked["rank_id"].astype(int) == rank].sort_values("step_ordinal")
        assert own[["row_start", "row_end"]].values.tolist() == theirs[["row_start", "row_end"]].values.tolist()
        assert (own["forward_layers"] == SCENARIOS["serving_dp"].layers).all() and own["complete"].all()


def test_dummy_forwards_are_labelled_on_the_rank_that_ran_them(dp_runs):
    root, out, _ = dp_runs["serving"]
    planted = SCENARIOS["serving_dp"].forwards
    found = pd.read_parquet(out / schema.FORWARD_SUMMARY.path)
    for rank in (0, 1):
        own = found[found["rank_id"].astype(int) == rank].sort_values("step_ordinal")
        dummy = [rank in f.dummy_ranks for f in planted]
        assert own["phase"].tolist() == ["dummy" if d else f.phase for f, d in zip(planted, dummy)]
        # a dummy runs one padding request per token, as many as its peers' graph runs (padding included)
        ran = [(f.graph_tokens or f.tokens) if d else f.tokens for f, d in zip(planted, dummy)]
        assert own["tokens"].tolist() == ran
        assert own["requests"].tolist() == [t if d else f.requests for f, d, t in zip(planted, dummy, ran)]
        assert own["graph_mode"].tolist() == [f.graph for f in planted]
    view = json.loads((out / "report" / "analysis_summary.json").read_text())["serving"]
    assert view["phases"]["dummy"]["forwards"] == sum(1 in f.dummy_ranks for f in planted)
    findings = json.loads((out / "diagnosis_findings.json").read_text())["diagnosis_findings"]
    assert [f["finding_type"] for f in findings] == []
