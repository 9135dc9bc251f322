"""Serving captures (issue 69): a capture without profiler steps — vLLM-Ascend's /start_profile …
/stop_profile runs no schedule, so kernel_details.csv has no Step Id and step_trace_time.csv one
whole-capture row per device with an empty Step — analyzes with status ok, each forward found from the
kernels as the steps the same capture with step markers has."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from npuprof.pipeline import schema
from npuprof.pipeline.runner import analyze
from npuprof.synth import SCENARIOS, generate

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
    assert json.loads((root / "ground_truth.json").read_text())["layout"] == "serving"


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
