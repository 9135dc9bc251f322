"""operator_low_efficiency: a heavy matmul shape far slower than the capture's fastest heavy matmul is
found, its cause read from the shape (a dimension off the cube's fractal, fp32 inputs) and priced at
the reference speed; a fast shape too small to matter sets no reference."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.planted import planted_finding

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.detectors.matmul_efficiency import (
    FINDING,
    likely_cause,
    reference_speeds,
    slow_shapes,
)
from npuprof.synth.layers import UNALIGNED_BY, UNALIGNED_SPEED

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

RULES = knowledge.load("diagnosis_rules")["findings"][FINDING]


def _shapes(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    """(input shapes, achieved TFLOP/s, µs over all calls) of bf16 matmul shapes, 10 calls each."""
    frame = pd.DataFrame(rows, columns=["input_shapes", "achieved_tflops", "duration_sum_us"])
    flops = frame["achieved_tflops"] * 1e6 * frame["duration_sum_us"] / 10
    return frame.assign(name="aclnnMatmul", compute_dtype="bf16", call_count=10, flops_per_call=flops, rank_count=1)


def test_the_reference_is_the_fastest_shape_that_holds_a_share_of_the_matmul_time():
    shapes = _shapes(
        [("64,64;64,64", 400.0, 10.0), ("4096,1024;1024,1024", 250.0, 5000.0), ("4096,1024;1528,1024", 100.0, 5000.0)]
    )
    # the 400 TFLOP/s shape is 0.1 % of the time: no yardstick
    assert reference_speeds(shapes, RULES["reference_share_min"]).to_dict() == {"bf16": 250.0}
    (slow,) = slow_shapes(shapes, RULES).itertuples(index=False)
    assert slow.input_shapes == "4096,1024;1528,1024" and slow.ratio == pytest.approx(0.4)
    assert slow.excess_us == pytest.approx(5000.0 * 0.6)  # its time beyond its FLOPs at 250 TFLOP/s


def test_a_card_slower_than_every_reference_leaves_the_check_not_judged_not_failed():
    """--hardware-model Ascend910B4 on a synth root sized for a faster card: every dtype's reference is
    above the named card's peak, so no shape is judged (it crashed dividing by an empty text reference)."""
    from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
    from npuprof.pipeline.stages.diagnostics.detectors.matmul_efficiency import operator_low_efficiency

    shapes = _shapes([("4096,1024;1024,1024", 250.0, 5000.0), ("4096,1024;1528,1024", 100.0, 5000.0)])
    shapes = shapes.assign(type="MatMulV3", input_dtypes="DT_BF16;DT_BF16")
    inputs = DiagnosisContext.from_frames(
        {"matmul_shapes": shapes, "hardware": {"name": "Ascend910B4", "cube_tflops": {"bf16": 200.0}}}
    )
    assert operator_low_efficiency(inputs) == []
    assert "faster than the named card's peak" in inputs.not_judged[FINDING]


def test_a_dtype_the_cards_profile_gives_no_peak_for_is_not_said_to_beat_it():
    """The real CNN on Ascend910B4: its matmuls are fp32, which the card's profile gives no peak for. It
    said "matmuls run faster than the named card's peak: fp32 32 TFLOP/s (peak nan)"; it says the profile
    gives no fp32 peak, and judges no fp32 shape."""
    from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
    from npuprof.pipeline.stages.diagnostics.detectors.matmul_efficiency import operator_low_efficiency

    shapes = _shapes([("4096,1024;1024,1024", 30.0, 5000.0), ("4096,1024;1528,1024", 10.0, 5000.0)])
    shapes = shapes.assign(type="MatMulV3", input_dtypes="DT_FLOAT;DT_FLOAT", compute_dtype="fp32")
    inputs = DiagnosisContext.from_frames(
        {"matmul_shapes": shapes, "hardware": {"name": "Ascend910B4", "cube_tflops": {"bf16": 280.0}}}
    )
    assert operator_low_efficiency(inputs) == []
    said = inputs.not_judged[FINDING]
    assert said == "the named card's profile gives no peak for fp32" and "nan" not in said


def test_a_capture_that_names_only_the_cards_family_is_told_so():
    """A db export's NPU_INFO says Ascend910B (a family): the check is not judged, and says the capture named
    the family, not that a text capture names nothing."""
    from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
    from npuprof.pipeline.stages.diagnostics.detectors.matmul_efficiency import operator_low_efficiency

    shapes = _shapes([("4096,1024;1024,1024", 250.0, 5000.0)]).assign(type="MatMulV3")
    inputs = DiagnosisContext.from_frames(
        {"matmul_shapes": shapes, "hardware": {"name": None, "capture_devices": ["Ascend910B"]}}
    )
    assert operator_low_efficiency(inputs) == []
    assert "names Ascend910B" in inputs.not_judged[FINDING] and "text capture" not in inputs.not_judged[FINDING]


def test_the_cause_is_read_from_the_shape_and_dtype():
    assert likely_cause("4096,1024;1528,1024", "DT_BF16;DT_BF16", 16)[0] == "fractal"
    assert "1528" in likely_cause("4096,1024;1528,1024", "DT_BF16;DT_BF16", 16)[1]
    assert likely_cause("4096,1024;1536,1024", "FLOAT;FLOAT", 16)[0] == "fp32"
    assert likely_cause("4096,1024;1536,1024", "DT_BF16;DT_BF16", 16)[0] == "unknown"


def test_the_planted_unaligned_ffn_is_found_with_both_its_matmuls(planted_outputs):
    planted = planted_finding(planted_outputs, "unaligned_ffn", FINDING)
    truth, finding, out = planted.truth, planted.finding, planted.out
    assert finding["rank_ids"] == sorted(int(r) for r in truth["ranks"])
    config, ranks = truth["model"]["config"], truth["workload"]["ranks"]
    ffn = config["intermediate_size"] // ranks  # the planted width on each tensor-parallel rank
    assert ffn % 16 and (ffn + UNALIGNED_BY) % 16 == 0
    metrics = finding["metrics"]
    assert f"dimension {ffn}, {2 * ffn} is not a multiple" in metrics["cause"]
    assert metrics["ratio"] == pytest.approx(UNALIGNED_SPEED, rel=0.02)
    assert metrics["calls"] == 2 * truth["workload"]["layers"] * len(truth["ranks"]) * truth["workload"]["steps"]
    assert finding["confidence"] == "medium"
    operators = pd.read_csv(out / schema.OPERATOR_SUMMARY_CSV.file)
    assert set(operators.loc[operators["evidence_id"].isin(finding["evidence_ids"]), "name"]) == {metrics["name"]}
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    # credited where its replay shortens the step: mostly the matmuls' own compute, the rest the waits of
    # the ranks that then wait less for each other at their TP all-reduces — never a transfer or idle gap
    explained = ledger[ledger["finding_type"] == FINDING]
    compute = explained["line"].str.startswith("compute ")
    waits = explained["line"].str.match(r"communication .* (wait|idle)$")
    assert len(explained) and (compute | waits).all()
    assert explained.loc[compute, "ms"].sum() >= 0.5 * explained["ms"].sum()
