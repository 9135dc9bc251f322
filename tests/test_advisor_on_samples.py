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
)


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
    assert not [f for f in sample_findings[sample]["diagnosis_findings"] if f["finding_type"] == check]


def test_a_capture_that_names_no_cores_is_not_judged_on_block_dims(sample_findings):
    assert "not_judged" not in sample_findings["qwen3_training"]
    (unjudged,) = sample_findings["text_level2"]["not_judged"]
    assert unjudged["finding_type"] == "block_dim_underuse" and "--hardware-model" in unjudged["reason"]
