"""env_setting: a recorded environment variable known to slow a step is reported where the capture shows
that slowdown, named as its likely cause and priced as it; a harmful setting with no symptom, or with a
symptom on other ranks, is not reported; the real captures' recorded settings are read."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import SAMPLE_ROOTS

from npuprof.pipeline import schema
from npuprof.pipeline.sources.capture_info import capture_info
from npuprof.pipeline.sources.discovery import discover
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.detectors.env_setting import FINDING, env_setting, harmful
from npuprof.pipeline.stages.diagnostics.findings import Finding, rule

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

SETTINGS = rule(FINDING)["settings"]


def test_a_setting_is_harmful_by_its_value():
    assert harmful("1", SETTINGS["ASCEND_LAUNCH_BLOCKING"]) and not harmful("0", SETTINGS["ASCEND_LAUNCH_BLOCKING"])
    assert not harmful("", SETTINGS["ASCEND_LAUNCH_BLOCKING"]) and not harmful(None, SETTINGS["ASCEND_LAUNCH_BLOCKING"])
    assert harmful("ring", SETTINGS["HCCL_ALGO"]) and not harmful("", SETTINGS["HCCL_ALGO"])  # "*": any value set
    allocator = SETTINGS["PYTORCH_NPU_ALLOC_CONF"]
    assert harmful("", allocator) and not harmful("max_split_size_mb:128,expandable_segments:True", allocator)


def _symptom(ranks: list[int]) -> Finding:
    return Finding(
        finding_type="host_launch_bound",
        scope="rank",
        rank_ids=ranks,
        evidence_ids=["r0.step#0"],
        statistic={"name": "idle_share_of_wall", "value": 0.5, "threshold": 0.03},
        values={},
        recoverable_ms_per_step=1.0,
        what_if=object(),
    )


def test_without_its_symptom_on_its_ranks_a_setting_is_not_reported():
    env = {0: {"ASCEND_LAUNCH_BLOCKING": "1"}, 1: {"ASCEND_LAUNCH_BLOCKING": ""}}
    for first in ([], [_symptom([1])]):  # no symptom; a symptom on a rank that runs without it
        context = DiagnosisContext.from_frames({"rank_env": env, "first_findings": first})
        assert env_setting(context) == []


def test_launch_blocking_is_found_as_the_cause_of_the_launch_bound_ranks(planted_outputs):
    _, out = planted_outputs["launch_blocking"]
    document = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    (found,) = [f for f in document if f["finding_type"] == FINDING]
    assert found["metrics"]["variable"] == "ASCEND_LAUNCH_BLOCKING" and found["metrics"]["value_text"] == "1"
    launch = [*(f for f in document if f["finding_type"] == "host_launch_bound"), *found.get("merged", [])]
    launch = [f for f in launch if f["finding_type"] == "host_launch_bound"]
    assert launch and found["recoverable_ms_per_step"] == pytest.approx(launch[0]["recoverable_ms_per_step"])
    assert found["rank_ids"] == launch[0]["rank_ids"] == [0, 1]
    lines = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)  # the launch idle lines name it their cause
    assert set(lines.loc[lines["line"] == "idle launch", "finding_type"]) == {FINDING}


def test_the_real_captures_record_their_settings():
    root, _ = SAMPLE_ROOTS["text_level2"]
    ranks = capture_info(discover(root))["ranks"]
    assert all(rank["env_variables"] and "ASCEND_LAUNCH_BLOCKING" in rank["env_variables"] for rank in ranks)
