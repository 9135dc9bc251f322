"""Capture health: a capture that is mostly idle, or a step holding one-time start-up work, is named —
with numbers read back from the raw kernel tables — and never priced as if it were a steady-state step."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import MSTT

from npuprof.pipeline import schema

FRAGMENT = MSTT / "ut" / "advisor" / "compute_advice" / "data" / "kernel_details.csv"
WARMUP = MSTT / "ut" / "advisor" / "advisor_backend" / "compute_advice" / "kernel_details.csv"
CONFIDENT = ("medium", "high")


def _document(out) -> dict:
    return json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())


def test_a_26_kernel_fragment_is_an_idle_capture_and_no_confident_finding_claims_its_idle(sample_outputs):
    out, _ = sample_outputs["mstt_advisor_46col"]
    raw = pd.read_csv(FRAGMENT)
    starts = pd.to_numeric(raw["Start Time(us)"].astype(str).str.strip())
    wall_ms = float((starts + raw["Duration(us)"]).max() - starts.min()) / 1000.0
    (health,) = _document(out)["capture_health"]
    assert health["kind"] == "idle_capture" and health["kernels"] <= len(raw) == 29  # 26 of them in its step
    # the device is busy at most the kernels' summed time: a sliver of the step
    assert health["busy_ms"] <= raw["Duration(us)"].sum() / 1000.0 + 1e-6
    assert health["busy_share"] < 0.01 and health["wall_ms"] >= wall_ms
    for finding in _document(out)["diagnosis_findings"]:
        claims_half = (finding["recoverable_ms_per_step"] or 0.0) > 0.5 * health["wall_ms"]
        assert not (claims_half and finding["confidence"] in CONFIDENT), finding["finding_type"]
    summary = json.loads((out / schema.ANALYSIS_SUMMARY).read_text())
    assert [item["kind"] for item in summary["capture_health"]] == ["idle_capture"]
    assert "Capture health (idle\\_capture)" in (out / schema.REPORT_MD).read_text()
    # ... and no catalog model is named from the handful of layers it ran
    assert summary["model_brief"]["closest_candidate"] is None


def test_a_one_time_broadcast_makes_its_step_a_warmup_step(sample_outputs):
    out, _ = sample_outputs["mstt_advisor_33col"]
    raw = pd.read_csv(WARMUP)
    broadcast = raw[raw["Type"].astype(str).str.contains("broadcast", case=False)]
    (health,) = _document(out)["capture_health"]
    assert health["kind"] == "warmup_step" and health["step"] == str(int(raw["Step Id"].iloc[0]))
    assert health["one_time_ms"] == pytest.approx(broadcast["Duration(us)"].sum() / 1000.0, rel=0.01)
    assert health["share"] > 0.5  # 309 ms of a 517 ms step
    assert "warm-up step" in (out / schema.REPORT_MD).read_text()


@pytest.mark.parametrize("name", ["qwen3_training", "text_level1", "db_level1"])
def test_real_training_steps_are_healthy(sample_outputs, name):
    out, _ = sample_outputs[name]
    assert _document(out)["capture_health"] == []


@pytest.mark.parametrize("name", ["clean", "pipeline_parallel", "slow_rank"])
def test_synthetic_steps_are_healthy(planted_outputs, name):
    _, out = planted_outputs[name]
    assert _document(out)["capture_health"] == []


def test_the_planted_idle_capture_is_named_and_its_twin_is_healthy(planted_outputs, tmp_path):
    """idle_capture: steps 10 and 11 of both ranks idle 200 ms on the host, so the device is busy a few percent
    of them: named once for both ranks and exactly those steps, the findings on them low confidence; the same
    capture without the stall (its twin) is healthy."""
    from npuprof.pipeline.runner import analyze
    from npuprof.synth import generate
    from npuprof.synth.twins import twin_of

    root, out = planted_outputs["idle_capture"]
    truth = json.loads((root / "ground_truth.json").read_text())
    (health,) = _document(out)["capture_health"]
    assert health["kind"] == "idle_capture" and health["rank_ids"] == sorted(int(r) for r in truth["ranks"])
    (stall,) = truth["faults"]
    assert health["step"] == ", ".join(map(str, stall["step_ids"]))  # exactly the stalled steps
    assert health["busy_share"] < 0.1 and health["wall_ms"] > stall["gap_us"] / 1000  # the stall is in the step
    assert all(f["confidence"] == "low" for f in _document(out)["diagnosis_findings"])
    twin = Path(generate(tmp_path / "twin", twin_of("idle_capture", "device_idle_bubble"), seed=truth["seed"])["root"])
    analyze(twin, tmp_path / "twin_out", jobs=1)
    assert _document(tmp_path / "twin_out")["capture_health"] == []


def test_the_planted_warmup_step_is_named_left_out_of_the_kpis_and_its_twin_is_healthy(planted_outputs, tmp_path):
    """warmup: the first step of every rank opens with a 12 ms parameter broadcast. Capture health names that
    step (its id) on every rank with the one-time ms its twin — the same capture without the broadcast —
    measures in ground truth's step walls (±15 %); the KPIs leave it out, so their step wall is the twin's
    (±2 %); the broadcast is priced as no finding; and the twin is healthy."""
    from npuprof.pipeline.runner import analyze
    from npuprof.synth import generate
    from npuprof.synth.twins import twin_of

    root, out = planted_outputs["warmup"]
    truth = json.loads((root / "ground_truth.json").read_text())
    (fault,) = truth["faults"]
    (health,) = _document(out)["capture_health"]
    assert health["kind"] == "warmup_step" and [int(health["step"])] == fault["step_ids"]
    assert health["rank_ids"] == sorted(int(r) for r in truth["ranks"])
    twin = Path(generate(tmp_path / "twin", twin_of("warmup", "warmup_step"), seed=truth["seed"])["root"])
    twin_truth = json.loads((twin / "ground_truth.json").read_text())
    analyze(twin, tmp_path / "twin_out", jobs=1)

    def step_wall_ms(ground_truth: dict, ordinal: int) -> float:
        return (
            sum(r["step_wall_us"][ordinal] for r in ground_truth["ranks"].values()) / len(ground_truth["ranks"]) / 1e3
        )

    (ordinal,) = fault["step_ordinals"]
    costs_ms = step_wall_ms(truth, ordinal) - step_wall_ms(twin_truth, ordinal)
    assert costs_ms > 5.0 and health["one_time_ms"] == pytest.approx(costs_ms, rel=0.15)
    kpis = json.loads((out / schema.ANALYSIS_SUMMARY).read_text())["kpis"]
    twin_kpis = json.loads((tmp_path / "twin_out" / schema.ANALYSIS_SUMMARY).read_text())["kpis"]
    assert kpis["warmup_steps_left_out"] == [health["step"]] and twin_kpis["warmup_steps_left_out"] == []
    assert kpis["step_wall_ms"]["mean"] == pytest.approx(twin_kpis["step_wall_ms"]["mean"], rel=0.02)
    assert "warm-up step 10 left out" in (out / schema.REPORT_MD).read_text()
    twin_document = _document(tmp_path / "twin_out")
    assert twin_document["capture_health"] == []
    types = sorted(f["finding_type"] for f in _document(out)["diagnosis_findings"])
    assert types == sorted(f["finding_type"] for f in twin_document["diagnosis_findings"])
