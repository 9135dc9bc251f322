"""A serving capture's findings (issue 69), each planted in synth and silent on the clean `serving` capture.

The host's turn between forwards: each forward of a capture without step marks starts where the rank's
previous one ended, its head is the device's idle between them (the ledger's `idle between forwards`), and
serving_host_gap names a host that readies each forward only after the last one ended.

Forwards run eager though their graph was captured (eager_fallback): the planted fallbacks are the
forwards found, priced from the gaps between their kernels beyond the replays' own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.rediagnose import rediagnose
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.stages.diagnostics.detectors.serving import fallbacks
from npuprof.pipeline.stages.diagnostics.findings import evidence_cap
from npuprof.synth import SCENARIOS, generate

PLANTED = SCENARIOS["serving_host_gap"]
LATE_US = PLANTED.faults[0].gap_us


def _run(base: Path, label: str, name: str, trace: bool = True) -> tuple[Path, Path, dict]:
    root, out = base / f"{label}_root", base / f"{label}_out"
    generate(root, SCENARIOS[name], seed=5, trace=trace)
    analyze(root, out, jobs=1)
    return root, out, json.loads((root / "ground_truth.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, Path, dict]]:
    """The late host with and without its host trace, and the clean serving capture: (root, out, truth)."""
    base = tmp_path_factory.mktemp("serving_gaps")
    return {
        "late": _run(base, "late", "serving_host_gap"),
        "late_untraced": _run(base, "late_untraced", "serving_host_gap", trace=False),
        "clean": _run(base, "clean", "serving"),
        "eager": _run(base, "eager", "eager_fallback"),
    }


def _findings(out: Path, finding_type: str = "serving_host_gap") -> list[dict]:
    found = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    return [f for f in found if f["finding_type"] == finding_type]


def test_each_forward_starts_where_the_previous_one_ended(runs):
    _, out, truth = runs["late"]
    steps = pd.read_parquet(out / schema.STEP_SEGMENTS.path)
    assert truth["layout"] == "serving" and not PLANTED.step_marks
    for rank, facts in truth["ranks"].items():
        own = steps[steps["rank_id"].astype(int) == int(rank)].sort_values("step_ordinal")
        assert (own["start_ns"].to_numpy()[1:] == own["end_ns"].to_numpy()[:-1]).all()
        # the head is the generator's gap: its wall from the previous forward's end less its device span
        gaps_us = np.subtract(facts["step_wall_us"], facts["forward_span_us"])
        np.testing.assert_allclose(own["head_ms"].to_numpy() * 1000.0, gaps_us, atol=0.01)
        assert gaps_us[0] == 0 and (gaps_us[1:] > LATE_US).all()
        assert own["start_source"].isna().tolist() == [True] + [False] * (len(own) - 1)
        assert (own["start_source"].iloc[1:] == schema.AFTER_PREVIOUS_FORWARD).all()


def test_the_late_host_is_named_with_what_it_did_and_priced_on_its_ledger_line(runs):
    root, out, truth = runs["late"]
    (finding,) = _findings(out)
    spec = knowledge.load("diagnosis_rules")["findings"]["serving_host_gap"]
    assert finding["rank_ids"] == [0, 1]
    assert [e["type"] for e in truth["expected_findings"]] == ["serving_host_gap"]
    assert finding["statistic"]["value"] >= spec["share_min"] and finding["confidence"] == "high"
    # the host trace's launch flows: each forward's first kernel launched only after the gap began
    assert finding["metrics"]["host_cause"] == "launch" and not finding["limitations"]
    assert finding["metrics"]["gap_p50_us"] == pytest.approx(LATE_US + 24, abs=5)
    # the gaps are the host's turn, not launch gaps inside a forward
    assert not _findings(out, "host_launch_bound") and not _findings(out, "device_idle_bubble")
    bubbles = pd.read_parquet(out / schema.BUBBLE_WINDOWS.path).set_index("evidence_id")
    cited = [e for e in finding["evidence_ids"] if e in bubbles.index]
    assert cited and (bubbles.loc[cited, "duration_us"] > LATE_US).all()
    # the ledger credits it what its replay removes: on the lines between forwards, but for the waits its
    # replay shifts between the two ranks' all-reduces (a rank's gap is not its peer's to the µs)
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    credited = ledger[ledger["explained_by"] == finding["claim_id"]]
    by_line = credited.groupby("line")["ms"].sum()
    assert by_line["idle between forwards"] >= 0.99 * by_line.sum()
    assert set(by_line.index) <= {
        "idle between forwards",
        "communication TP allreduce wait",
        "communication TP allreduce idle",
    }
    per_step = credited["ms"].sum() / ledger.groupby(["rank_id", "step_ordinal"]).ngroups
    assert per_step == pytest.approx(finding["recoverable_ms_per_step"], rel=0.01)
    # ... a gap cut to the launch in flight on every forward but the first (which has none)
    rank0 = truth["ranks"]["0"]
    gaps_us = np.subtract(rank0["step_wall_us"], rank0["forward_span_us"])[1:]
    forwards = len(PLANTED.forwards)
    cut_ms = (gaps_us - spec["gap_floor_us"]).sum() / 1000.0 / forwards
    assert finding["recoverable_ms_per_step"] == pytest.approx(cut_ms, rel=0.02)


def test_without_the_host_trace_the_gap_is_priced_the_same_and_its_cause_left_unsaid(runs):
    (traced,) = _findings(runs["late"][1])
    (untraced,) = _findings(runs["late_untraced"][1])
    assert untraced["rank_ids"] == traced["rank_ids"]
    assert untraced["recoverable_ms_per_step"] == pytest.approx(traced["recoverable_ms_per_step"], rel=0.01)
    assert untraced["metrics"]["host_cause"] is None and untraced["limitations"]
    assert "not named" in untraced["summary"]


def test_gaps_longer_than_the_server_waits_for_requests_are_not_the_hosts(runs):
    _, out, _ = runs["late"]
    # every gap (~524 µs) past a 0.4 ms bound: the server had nothing to run, nothing to recover
    waiting = rediagnose(out, {"findings.serving_host_gap.waiting_gap_ms": 0.4}, write=False)
    assert not [f for f in waiting["diagnosis_findings"] if f["finding_type"] == "serving_host_gap"]
    (kept,) = [
        f
        for f in rediagnose(out, {"findings.serving_host_gap.waiting_gap_ms": 0.6}, write=False)["diagnosis_findings"]
        if f["finding_type"] == "serving_host_gap"
    ]
    assert kept["recoverable_ms_per_step"] == pytest.approx(_findings(out)[0]["recoverable_ms_per_step"])
    # a bound at the median gap: the longer half is the server waiting, neither priced nor cited
    steps = pd.read_parquet(out / schema.STEP_SEGMENTS.path)
    heads_ms = steps.loc[steps["start_source"] == schema.AFTER_PREVIOUS_FORWARD, "head_ms"]
    bound_ms = float(heads_ms.median())
    (half,) = [
        f
        for f in rediagnose(out, {"findings.serving_host_gap.waiting_gap_ms": bound_ms}, write=False)[
            "diagnosis_findings"
        ]
        if f["finding_type"] == "serving_host_gap"
    ]
    assert half["limitations"] and "left out" in half["limitations"][-1]
    assert half["recoverable_ms_per_step"] < 0.6 * kept["recoverable_ms_per_step"]
    bubbles = pd.read_parquet(out / schema.BUBBLE_WINDOWS.path).set_index("evidence_id")
    cited = [e for e in half["evidence_ids"] if e in bubbles.index]
    assert cited and (bubbles.loc[cited, "duration_us"] <= bound_ms * 1000.0).all()


def test_a_host_ahead_of_the_device_leaves_only_the_launch_between_forwards(runs):
    _, out, truth = runs["clean"]
    assert not _findings(out) and "serving_host_gap" in truth["unexpected_findings"]
    steps = pd.read_parquet(out / schema.STEP_SEGMENTS.path)
    floor_us = knowledge.load("diagnosis_rules")["findings"]["serving_host_gap"]["gap_floor_us"]
    assert (steps["head_ms"] * 1000.0 < floor_us).all() and (steps["head_ms"] > 0).sum() == len(steps) - 2
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    between = ledger[ledger["line"] == "idle between forwards"]
    assert len(between) and between["explained_by"].str.startswith("expected:").all()
    # capture health measures a forward without the host's turn before it
    assert not json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text()).get("capture_health")


# --- eager_fallback ------------------------------------------------------------------------------------

FALLBACK = SCENARIOS["eager_fallback"].faults[0]


def test_the_forwards_that_ran_eager_with_a_graph_are_the_planted_ones(runs):
    _, out, _ = runs["eager"]
    forwards = pd.read_parquet(out / schema.FORWARD_SUMMARY.path)
    forwards["rank_id"] = forwards["rank_id"].astype(int)
    fell = forwards[fallbacks(forwards)]
    for rank in (0, 1):
        assert sorted(fell.loc[fell["rank_id"] == rank, "step_ordinal"]) == list(FALLBACK.steps)
    (finding,) = _findings(out, "eager_fallback")
    assert finding["rank_ids"] == [0, 1] and finding["confidence"] == "medium"
    planted = {f"r{rank}.step#{step}" for rank in (0, 1) for step in FALLBACK.steps}
    cited = set(finding["evidence_ids"])  # the costliest first, as many as a finding cites
    assert cited <= planted and len(cited) == min(len(planted), evidence_cap())
    # forwards of 3, 4 or 5 requests, replayed elsewhere as the graphs of 4 and 8
    assert finding["metrics"]["tokens"] == "3, 4, 5" and finding["metrics"]["count"] == 2 * len(FALLBACK.steps)


def test_each_fallback_is_priced_at_the_launch_wait_planted_in_it(runs):
    root, out, _ = runs["eager"]
    (finding,) = _findings(out, "eager_fallback")
    # the planted wait: gap_us before each compute kernel of the forwards that fell back
    details = pd.read_csv(next(root.glob("*_ascend_pt")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    compute_per_forward = (~details["Type"].astype(str).str.startswith("hcom")).sum() / len(PLANTED.forwards)
    planted_ms = FALLBACK.gap_us * compute_per_forward / 1000.0
    assert finding["metrics"]["ms_per_forward"] == pytest.approx(planted_ms, rel=0.1)
    per_step = planted_ms * len(FALLBACK.steps) / len(PLANTED.forwards)
    assert finding["recoverable_ms_per_step"] == pytest.approx(per_step, rel=0.15)
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    credited = ledger[ledger["explained_by"] == finding["claim_id"]].groupby("line")["ms"].sum()
    assert credited.get("idle launch", 0.0) >= 0.9 * credited.sum()  # the host launched each kernel late
    # the host trace shows those forwards launch-bound: a symptom naming the fallback as its likely cause,
    # which the ledger does not credit (the cause holds its ms)
    (symptom,) = _findings(out, "host_launch_bound")
    assert [c["finding_type"] for c in symptom["likely_causes"]] == ["eager_fallback"]
    assert not (ledger["explained_by"] == symptom["claim_id"]).any()


def test_eager_forwards_without_a_graph_of_their_size_are_no_fallback(runs):
    _, out, _ = runs["clean"]
    forwards = pd.read_parquet(out / schema.FORWARD_SUMMARY.path)
    forwards["rank_id"] = forwards["rank_id"].astype(int)
    eager = forwards[forwards["graph_mode"] == "eager"]
    # the prefill and the mixed batches over the largest piecewise graph run eager by design
    assert set(eager["phase"]) == {"prefill", "mixed"} and not fallbacks(forwards).any()
    assert not _findings(out, "eager_fallback")
