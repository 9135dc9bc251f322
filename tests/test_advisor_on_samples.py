"""The efficiency checks (issue 48) on the real captures: silent where the capture runs its kernels well,
and saying "not judged" where it lacks the data a check needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import PYTORCH_DATA, QWEN_TRAINING

from npuprof.pipeline import schema
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import analyze

CHECKS = (
    "block_dim_underuse",
    "unfused_op_pattern",
    "fusible_op_sequence",
    "small_packet_collective",
    "bandwidth_contention",
    "operator_low_efficiency",
    "rdma_retransmission",
    "sdma_misaligned",  # the CNN's 4 misaligned moves per rank run as fast as their aligned siblings
    "syncbn",  # neither runs a SyncBatchNorm
)
# what a check finds on a real capture, where it finds something: (sample, check) -> the operator's shapes
FOUND_ON_SAMPLES = {
    # Qwen3's LM-head input gradient (dY · W: K = the 151,936-token vocabulary, N = 1,024) runs at 69
    # TFLOP/s, a third of the 216 its fastest heavy matmul reaches (its forward on the same weight: 172);
    # aligned, bf16: the cause is not in the shape, so the finding is low confidence
    ("qwen3_training", "operator_low_efficiency"): "4096,151936;151936,1024",
}


@pytest.fixture(scope="module")
def sample_findings(tmp_path_factory) -> dict[str, dict]:
    """diagnosis_findings.json of Qwen3 on its card (its cube kernels run 20 blocks, its vector kernels
    40: a 20 / 40-core 910B3 / B4) and of the CNN capture, whose card nothing names."""
    base = tmp_path_factory.mktemp("advisor")
    runs = {
        "qwen3_training": (QWEN_TRAINING, AnalyzeOptions(hardware_model="Ascend910B4")),
        "text_level2": (PYTORCH_DATA / "text" / "level2", AnalyzeOptions()),
    }
    found = {}
    for name, (root, options) in runs.items():
        analyze(root, base / name, jobs=2, options=options)
        found[name] = json.loads((Path(base / name) / schema.DIAGNOSIS_FINDINGS).read_text())
    return found


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("sample", ["qwen3_training", "text_level2"])
def test_the_real_captures_run_their_kernels_fused_and_full_width(sample_findings, sample, check):
    found = [f for f in sample_findings[sample]["diagnosis_findings"] if f["finding_type"] == check]
    if (sample, check) not in FOUND_ON_SAMPLES:
        assert not found
        return
    (finding,) = found
    assert finding["metrics"]["shapes"] == FOUND_ON_SAMPLES[(sample, check)] and finding["confidence"] == "low"


def test_a_capture_that_names_no_cores_is_not_judged_on_block_dims(sample_findings):
    # Qwen3's capture holds no trace_view.json nor task table: the size of each SDMA move and the framework
    # op that launched each collective are unknown
    unjudged = {u["finding_type"]: u["reason"] for u in sample_findings["qwen3_training"]["not_judged"]}
    assert set(unjudged) == {"sdma_misaligned", "syncbn"} and "COMMUNICATION_TASK_INFO" in unjudged["sdma_misaligned"]
    unjudged = {u["finding_type"]: u for u in sample_findings["text_level2"]["not_judged"]}
    assert set(unjudged) == {"block_dim_underuse", "operator_low_efficiency"}  # the CNN capture names no card
    assert "--hardware-model" in unjudged["operator_low_efficiency"]["reason"]
    unjudged = unjudged["block_dim_underuse"]
    assert unjudged["finding_type"] == "block_dim_underuse" and "--hardware-model" in unjudged["reason"]
