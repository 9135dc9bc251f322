"""A serving capture's findings (issue 69), each planted in synth and silent on the clean `serving` capture.

The host's turn between forwards: each forward of a capture without step marks starts where the rank's
previous one ended, its head is the device's idle between them (the ledger's `idle between forwards`), and
serving_host_gap names a host that readies each forward only after the last one ended.

Forwards run eager though their graph was captured (eager_fallback): the planted fallbacks are the
forwards found, priced from the gaps between their kernels beyond the replays' own.

Decodes replayed from graphs captured for bigger batches (graph_padding_waste): the padding found is the
planted one, priced from the capture's own replays of each size against what the twin without padding
measures forward by forward."""

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
from npuprof.pipeline.stages.diagnostics.detectors.graph_padding import padding_cost, same_graph, sizes_text
from npuprof.pipeline.stages.diagnostics.detectors.serving import fallbacks
from npuprof.pipeline.stages.diagnostics.findings import evidence_cap
from npuprof.synth import SCENARIOS, generate
from npuprof.synth.serving import captured_size
from npuprof.synth.twins import twin_of

# one worker runs the module: its module fixture is built once (xdist would build it again on each
# worker a test of it lands on, and again whenever modules interleave there)
pytestmark = pytest.mark.xdist_group("serving_findings")

PLANTED = SCENARIOS["serving_host_gap"]
LATE_US = PLANTED.faults[0].gap_us


def _run(base: Path, label: str, name: str, trace: bool = True, twin: str = "") -> tuple[Path, Path, dict]:
    """Scenario ``name`` (without the fault planting ``twin``, where given) generated and analyzed."""
    root, out = base / f"{label}_root", base / f"{label}_out"
    generate(root, twin_of(name, twin) if twin else SCENARIOS[name], seed=5, trace=trace)
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
        "padded": _run(base, "padded", "graph_padding_waste"),
        "unpadded": _run(base, "unpadded", "graph_padding_waste", twin="graph_padding_waste"),
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


PADDING = SCENARIOS["graph_padding_waste"]


def test_the_padding_found_is_the_planted_padding(runs):
    _, out, truth = runs["padded"]
    forwards = pd.read_parquet(out / schema.FORWARD_SUMMARY.path)
    forwards["rank_id"] = forwards["rank_id"].astype(int)
    factor = PADDING.faults[0].factor
    full = [i for i, f in enumerate(PADDING.forwards) if f.graph == "full"]
    padded = [i for i in full if captured_size(PADDING.forwards[i].tokens, factor) > PADDING.forwards[i].tokens]
    for rank in (0, 1):
        own = forwards[forwards["rank_id"] == rank].set_index("step_ordinal").loc[full]
        assert own["tokens"].tolist() == [PADDING.forwards[i].tokens for i in full]
        assert own["padded_tokens"].tolist() == [
            captured_size(PADDING.forwards[i].tokens, factor) - PADDING.forwards[i].tokens for i in full
        ]
    (finding,) = _findings(out, "graph_padding_waste")
    assert [e["type"] for e in truth["expected_findings"]] == ["graph_padding_waste"]
    assert finding["rank_ids"] == [0, 1] and finding["metrics"]["count"] == 2 * len(padded)
    assert set(finding["evidence_ids"]) <= {f"r{r}.step#{i}" for r in (0, 1) for i in padded}
    assert finding["metrics"]["sizes"] == "16 (12), 64 (42, 62), 256 (92)"


def test_each_padded_forward_is_priced_at_what_its_unpadded_twin_saves(runs):
    """The padding's cost per forward against the twin's forwards (a graph for every batch size, no padding),
    forward by forward from the two ground truths: within 15 % though the yardstick reads the batches below
    the smallest size replayed (12 of the graph of 16) as free; the ledger credits what the replay removes,
    on the compute lines of the blocks it ran in and the all-reduces' transfer."""
    _, out, truth = runs["padded"]
    _, _, twin = runs["unpadded"]
    (finding,) = _findings(out, "graph_padding_waste")
    factor = PADDING.faults[0].factor
    padded = [
        i for i, f in enumerate(PADDING.forwards) if f.graph == "full" and captured_size(f.tokens, factor) > f.tokens
    ]
    spans = [(truth["ranks"][r]["forward_span_us"], twin["ranks"][r]["forward_span_us"]) for r in ("0", "1")]
    saved_us = [np.subtract(padded_us, unpadded_us)[padded] for padded_us, unpadded_us in spans]
    assert finding["metrics"]["us_per_forward"] == pytest.approx(np.mean(saved_us), rel=0.15)
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    credited = ledger[ledger["explained_by"] == finding["claim_id"]]
    by_line = credited.groupby("line")["ms"].sum()
    own = by_line.index.str.startswith("compute ") | (by_line.index == "communication TP allreduce transfer")
    assert by_line["communication TP allreduce transfer"] > 0.05 * by_line.sum()  # the padded rows' bytes
    # the rest: the all-reduce waits the replay shifts between the ranks (their padding is not the same µs)
    assert by_line[own].sum() >= 0.99 * by_line.sum()
    assert set(by_line.index[~own]) <= {"communication TP allreduce wait", "communication TP allreduce idle"}
    per_step = credited["ms"].sum() / ledger.groupby(["rank_id", "step_ordinal"]).ngroups
    assert per_step == pytest.approx(finding["recoverable_ms_per_step"], abs=0.0006)  # it is rounded to the µs
    assert "Capture graphs at the batch sizes the server runs" in (out / schema.REPORT_MD).read_text()


def test_padding_of_small_decodes_is_nearly_free_and_not_reported(runs):
    """The clean serving capture pads its decodes of 3 and 5 requests to the graphs of 4 and 8 (a third of
    their tokens), but its replays show kernels that hardly grow with the batch there: nothing to report.
    The twin without padding has none either."""
    for label in ("clean", "unpadded"):
        forwards = pd.read_parquet(runs[label][1] / schema.FORWARD_SUMMARY.path)
        assert not _findings(runs[label][1], "graph_padding_waste")
    assert (forwards["padded_tokens"].fillna(0) == 0).all()
    clean = pd.read_parquet(runs["clean"][1] / schema.FORWARD_SUMMARY.path)
    assert clean["padded_tokens"].sum() > 0.2 * clean.loc[clean["padded_tokens"].notna(), "tokens"].sum()


def _replays(
    sizes: list[int], tokens: list[int], us: list[list[float]], types: list[list[str]] | None = None
) -> pd.DataFrame:
    """One rank's replays: a forward per size (its real batch ``tokens``), each kernel position's µs (and
    type, MatMulV2 where not given)."""
    types = types or [["MatMulV2"] * len(kernels) for kernels in us]
    rows = [
        {"rank_id": 0, "step_ordinal": f, "tokens": t, "size": s, "position": p, "type": k, "duration_us": d}
        for f, (s, t, kernels, named) in enumerate(zip(sizes, tokens, us, types))
        for p, (d, k) in enumerate(zip(kernels, named))
    ]
    return pd.DataFrame(rows)


def test_the_yardstick_reads_between_the_sizes_replayed_and_never_below_the_smallest():
    # a kernel of 1 µs + 0.1 µs a token and one that does not grow: graphs of 16, 64 and 256
    durations = [[2.6, 5], [7.4, 5], [26.6, 5], [7.4, 5], [2.6, 5]]
    kernels = _replays([16, 64, 256, 64, 16], [16, 40, 256, 64, 10], durations)
    cost = padding_cost(kernels)
    # the batch of 40 in the graph of 64: 24 tokens at 0.1 µs; the batch of 10 reads the graph of 16's own
    np.testing.assert_allclose(cost["waste_us"].to_numpy(), [0, 0, 2.4, 0, 0, 0, 0, 0, 0, 0], atol=1e-9)
    np.testing.assert_allclose(cost["at_real_us"].to_numpy()[2], 5.0)
    # one size replayed: no yardstick, nothing priced
    assert (padding_cost(_replays([64, 64], [40, 64], [[7.4], [7.4]]))["waste_us"] == 0).all()


def test_a_forward_that_replayed_another_kernel_sequence_is_never_compared():
    """A size whose graph holds other kernels in the same number (a compiler's choice per batch size) names
    other kernels at the same positions: its forward is left out, not read against the others."""
    usual, other = ["MatMulV2", "RmsNorm"], ["RmsNorm", "MatMulV2"]
    kernels = _replays([16, 64, 64, 256], [16, 40, 64, 200], [[2, 1]] * 4, [usual, usual, other, usual])
    assert sorted(same_graph(kernels)["step_ordinal"].unique()) == [0, 1, 3]


def test_a_size_with_many_real_batches_is_said_as_their_range():
    """A real server runs dozens of batch sizes under one graph: the finding names their range, not each."""
    costed = pd.DataFrame({"size": [16, 16] + [256] * 37, "tokens": [12, 16] + list(range(129, 166))})
    assert sizes_text(costed) == "16 (12, 16), 256 (129–165, 37 batch sizes)"
