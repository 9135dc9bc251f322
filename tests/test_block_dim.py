"""block_dim_underuse: a long kernel launched on fewer cores than the card has is found from the capture's
block dims and core counts, priced at its idle cores' share, and where the capture names no core counts
the check says it did not judge instead of passing the root as clean."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from npuprof.pipeline import schema
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.stage_range import StageRange
from npuprof.pipeline.stages.diagnostics.detectors.block_dim import _rank_widths, launch_utilization

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

FINDING = "block_dim_underuse"


def _findings(out) -> dict:
    return json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())


def test_a_launch_keeps_its_blocks_over_the_core_slots_of_its_waves_busy():
    utilization = launch_utilization(np.array([8.0, 24.0, 30.0, 48.0, 1.0]), np.array([24.0, 24.0, 24.0, 24.0, 40.0]))
    assert utilization.tolist() == pytest.approx([1 / 3, 1.0, 30 / 48, 1.0, 1 / 40])


def test_a_ranks_narrow_launches_are_read_off_its_categorical_columns_as_from_its_texts():
    """The launches a rank keeps (a kernel on a known core kind, at or below the rule's utilization) are the
    plain definition's, row for row, from categorical name and accelerator columns: missing or unknown
    accelerators and a missing name included; with no row kept the texts are still text columns."""
    spec = {"cores_by_accelerator": {"AI_CORE": "cube", "AI_VECTOR_CORE": "vector"}, "utilization_max": 0.5}
    cores = {"cube": 24, "vector": 48}
    vector, cube = "AI_VECTOR_CORE", "AI_CORE"
    texts = pd.DataFrame(
        {
            "name": ["mm", None, "add", "mm", "odd", "mul", "mm"],
            "accelerator_core": [cube, vector, vector, None, "AI_CPU", vector, cube],
            "block_dim": [8, 12, 48, 8, 1, 20, 24],
            "start_ns": [1_000, 2_000, 3_000, 4_000, 5_000, 6_000, 7_000],
            "duration_ns": [500, 700, 900, 300, 100, 250, 400],
        }
    )
    categorical = texts.astype({"name": "category", "accelerator_core": "category"})
    widths = _rank_widths(3, categorical, cores, spec)
    # the plain definition, on the texts
    core = texts["accelerator_core"].map(spec["cores_by_accelerator"])
    known = texts[core.notna()].assign(core=core[core.notna()])
    width = known["core"].map(cores).to_numpy(float)
    utilization = launch_utilization(known["block_dim"].to_numpy(float), width)
    kept = known[utilization <= spec["utilization_max"]]
    assert kept["start_ns"].tolist() == [1_000, 2_000, 6_000]  # mm, the nameless launch, mul
    assert widths["name"].tolist()[::2] == ["mm", "mul"] and pd.isna(widths["name"].iloc[1])
    assert widths["core"].tolist() == kept["core"].tolist() == ["cube", "vector", "vector"]
    assert widths["block_dim"].tolist() == kept["block_dim"].tolist() and widths["cores"].tolist() == [24, 48, 48]
    assert widths["utilization"].tolist() == utilization[utilization <= 0.5].tolist() == [8 / 24, 12 / 48, 20 / 48]
    assert widths["start_us"].tolist() == [1.0, 2.0, 6.0] and widths["duration_us"].tolist() == [0.5, 0.7, 0.25]
    assert widths["idle_us"].tolist() == (widths["duration_us"] * (1 - widths["utilization"])).tolist()
    assert (widths["rank_id"] == 3).all()
    none = _rank_widths(3, categorical[categorical["block_dim"] == 48], cores, spec)
    assert none.empty and str(none["name"].dtype) == str(none["core"].dtype) == "str"


def test_the_narrow_down_projection_is_found_on_every_rank_with_its_operator_rows(planted_outputs):
    root, out = planted_outputs["narrow_matmul"]
    truth = json.loads((root / "ground_truth.json").read_text())
    (fault,) = [f for f in truth["faults"] if f["kind"] == FINDING]
    (finding,) = [f for f in _findings(out)["diagnosis_findings"] if f["finding_type"] == FINDING]
    cores = json.loads((out / schema.CAPTURE_INFO).read_text())["ranks"][0]["ai_core_count"]
    assert finding["rank_ids"] == sorted(int(r) for r in truth["ranks"])  # the fault is on every rank
    assert finding["metrics"]["block_dim"] == round(cores / fault["factor"]) and finding["metrics"]["core"] == "cube"
    assert finding["statistic"]["value"] == pytest.approx(1 / fault["factor"])
    # the narrow calls are the down projections, one per dense layer per step: their weight maps the FFN
    # width (tensor parallel over the inference job's ranks) into the hidden size
    events = pd.read_parquet(out / schema.NORMALIZED_EVENTS, columns=["name", "block_dim", "input_shapes"])
    narrow = events[events["block_dim"] == finding["metrics"]["block_dim"]]
    assert set(narrow["name"]) == {finding["metrics"]["name"]}
    config = truth["model"]["config"]
    down = f"{config['hidden_size']},{config['intermediate_size'] // truth['workload']['ranks']}"
    assert (narrow["input_shapes"].str.split(";").str[-1] == down).all()
    assert finding["metrics"]["calls_per_step"] == pytest.approx(truth["workload"]["layers"])
    operators = pd.read_csv(out / schema.OPERATOR_SUMMARY_CSV.file)
    cited = operators[operators["evidence_id"].isin(finding["evidence_ids"])]
    assert len(cited) and set(cited["name"]) == {finding["metrics"]["name"]}


def test_without_core_counts_the_check_says_it_did_not_judge(planted_outputs, tmp_path):
    """A capture whose CANN info.json is gone (the shared samples ship none): not judged, named in the
    findings and the report; the card named by --hardware-model judges it again."""
    planted, _ = planted_outputs["narrow_matmul"]
    root = shutil.copytree(planted, tmp_path / "root")
    for info in root.rglob("info.json*"):
        info.unlink()
    analyze(root, tmp_path / "unnamed", jobs=2)
    found = _findings(tmp_path / "unnamed")
    assert not [f for f in found["diagnosis_findings"] if f["finding_type"] == FINDING]
    (unjudged,) = [u for u in found["not_judged"] if u["finding_type"] == FINDING]
    assert unjudged["finding_type"] == FINDING and "ranks 0, 1, 2, 3" in unjudged["reason"]
    assert "Not judged: `block_dim_underuse`" in (tmp_path / "unnamed" / schema.REPORT_MD).read_text()
    named = AnalyzeOptions(hardware_model="Ascend910B1")  # 24 cube and 48 vector cores, as synth's card
    analyze(None, tmp_path / "unnamed", jobs=2, options=named, stage_range=StageRange(from_stage="model"))
    again = _findings(tmp_path / "unnamed")
    assert [f["finding_type"] for f in again["diagnosis_findings"]].count(FINDING) == 1 and "not_judged" not in again
    # the narrow launch is also a matmul far slower than the capture's others: its likely cause
    (slow,) = [f for f in again["diagnosis_findings"] if f["finding_type"] == "operator_low_efficiency"]
    assert [c["finding_type"] for c in slow["likely_causes"]] == [FINDING]
