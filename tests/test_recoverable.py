"""Recoverable time per finding: the step replay reproduces the measured steps, each what-if does what
it says on a hand-built step, and every planted finding's ``recoverable_ms_per_step`` matches what its
twin — the same capture (seed, shapes) without that fault — actually measures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.reported import reported_findings

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics import retiming
from npuprof.synth import SCENARIOS, generate
from npuprof.synth.faults import CAPTURE_CONDITIONS
from npuprof.synth.twins import TWINS, twin_of

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

TOLERANCE = 0.15  # the bound: predicted within ±15 % of the twin's measured difference


def findings_of(out: Path) -> list[dict]:
    return json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]


def mean_wall_ms(out: Path) -> float:
    """The mean step wall npuprof measured (step_summary.csv: every rank's every step)."""
    return float(pd.read_csv(out / schema.STEP_SUMMARY.file)["wall_ms"].mean())


def truth_mean_wall_ms(root: Path) -> float:
    """The mean step wall the generator laid out (ground_truth.json: every rank's every step), which no
    part of the analysis computes: what a twin's difference is measured by."""
    truth = json.loads((root / "ground_truth.json").read_text())
    walls = [wall for rank in truth["ranks"].values() for wall in rank["step_wall_us"]]
    return sum(walls) / len(walls) / 1000.0


def twin_measures_ms(root: Path, twin, tmp_path: Path) -> float:
    """How much shorter the mean step of ``twin`` (generated at ``root``'s seed) is than ``root``'s, from the
    two ground truths; and npuprof's own walls of ``root`` are checked against its truth on the way."""
    seed = json.loads((root / "ground_truth.json").read_text())["seed"]
    twin_root = Path(generate(tmp_path / "twin", twin, seed=seed)["root"])
    return truth_mean_wall_ms(root) - truth_mean_wall_ms(twin_root)


def model_of(out: Path) -> retiming.StepModel:
    alignment = pd.read_parquet(out / schema.COLLECTIVE_ALIGNMENT.path)
    return retiming.build_step_model(alignment, pd.read_csv(out / schema.STEP_SUMMARY.file))


def two_rank_frames(**alignment_columns: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The steps and alignment of ``two_rank_step``, the alignment with ``alignment_columns`` added."""
    steps = pd.DataFrame(
        {"rank_id": [0, 1], "step_ordinal": [0, 0], "step_id": [5, 5], "start_us": [0.0, 0.0], "end_us": [100.0] * 2}
    )
    alignment = pd.DataFrame(
        {
            "alignment_id": ["c0", "c0"],
            "rank_id": [0, 1],
            "start_us": [30.0, 60.0],
            "end_us": [70.0, 70.0],
            "corrected_start_us": [30.0, 60.0],
            "corrected_end_us": [70.0, 70.0],
            **alignment_columns,
        }
    )
    return steps, alignment


def two_rank_step() -> retiming.StepModel:
    """Ranks 0 and 1, one step of 100 µs each on a shared clock; they meet in one all-reduce that rank 0
    reaches at 30 µs and rank 1 at 60 µs (rank 0 waits 30); transit 10 µs; then 30 µs of work each."""
    steps, alignment = two_rank_frames()
    return retiming.build_step_model(alignment, steps)


def test_a_replays_savings_are_placed_where_the_step_got_shorter():
    """Rank 1 at rank 0's pace on the hand-built step: rank 1's step saves 30 µs of its own work, rank 0's
    the 30 µs it waited for rank 1 at the all-reduce (its role and kind kept); the parts of each replayed
    slot add up to its wall."""
    from npuprof.pipeline.stages.diagnostics.savings import replay_savings

    steps, alignment = two_rank_frames(kind=["allreduce"] * 2, parallel_role=["DP"] * 2)
    model = retiming.build_step_model(alignment, steps)
    parts = model.baseline_parts
    rows = np.bincount(model.rows["slot"], weights=parts.row_work_us + parts.row_wait_us + parts.row_transit_us)
    np.testing.assert_allclose(rows + parts.slot_tail_us + parts.slot_stream_us, parts.slot_wall_us)
    saved = replay_savings(model, retiming.at_peer_median(model, 1)).sort_values(["rank_id", "part"])
    assert saved[["rank_id", "part", "role", "kind"]].values.tolist() == [
        [0, "wait", "DP", "allreduce"],
        [1, "work", "", ""],
    ]
    assert saved["ms"].tolist() == pytest.approx([0.030, 0.030])


def test_a_collective_whose_group_the_capture_lacks_members_of_is_not_ended_sooner():
    """Ranks 0 and 1 meet in an all-reduce of an 8-member group: rank 1 arrives at 60 µs, the op ends at 70
    with 4 µs of its own transit (communication.json's), so the members the capture lacks arrived at 66.
    Rank 1 arriving 20 µs sooner then waits longer; the step is not shorter. With the group whole, the
    same change saves the 6 µs it did not wait before."""
    steps, alignment = two_rank_frames(transit_us=[4.0, 4.0])
    idle_on_1 = pd.DataFrame({"rank_id": [1], "start_us": [10.0], "duration_us": [20.0]})
    pinned = retiming.build_step_model(alignment, steps, incomplete={"c0"})
    assert pinned.transit_us.tolist() == [4.0] and pinned.pinned_us.tolist() == [66.0]
    assert retiming.step_walls(pinned).tolist() == [100.0]  # the measured step replays unchanged
    assert retiming.recoverable_ms(pinned, retiming.close_windows(pinned, idle_on_1)) == 0.0
    whole = retiming.build_step_model(alignment, steps)
    assert retiming.recoverable_ms(whole, retiming.close_windows(whole, idle_on_1)) == pytest.approx(0.020)


def test_the_replay_of_a_hand_built_step():
    model = two_rank_step()
    assert retiming.step_walls(model).tolist() == [100.0]
    assert model.transit_us.tolist() == [10.0]
    # rank 1's work before the all-reduce at rank 0's: it arrives at 30, the step ends at 70
    assert retiming.recoverable_ms(model, retiming.at_peer_median(model, 1)) == pytest.approx(0.030)
    # rank 0 is already first: evening it out saves nothing
    assert retiming.recoverable_ms(model, retiming.at_peer_median(model, 0)) == 0.0
    # a 20 µs idle window on rank 0 before the all-reduce is absorbed by its wait for rank 1 ...
    idle_on_0 = pd.DataFrame({"rank_id": [0], "start_us": [10.0], "duration_us": [20.0]})
    assert retiming.recoverable_ms(model, retiming.close_windows(model, idle_on_0)) == 0.0
    # ... one on rank 1 is not, nor is one after the all-reduce (the step's tail)
    idle_on_1 = pd.DataFrame({"rank_id": [1], "start_us": [10.0], "duration_us": [20.0]})
    assert retiming.recoverable_ms(model, retiming.close_windows(model, idle_on_1)) == pytest.approx(0.020)
    tail_of_both = pd.DataFrame({"rank_id": [0, 1], "start_us": [80.0, 80.0], "duration_us": [5.0, 5.0]})
    assert retiming.recoverable_ms(model, retiming.close_windows(model, tail_of_both)) == pytest.approx(0.005)
    # the transit at half: 5 µs
    half = retiming.scaled_transit(model, pd.Series(0.5, index=["c0"]))
    assert retiming.recoverable_ms(model, half) == pytest.approx(0.005)
    # a window longer than the work it sits in cannot make the step shorter than its collectives
    huge = pd.DataFrame({"rank_id": [0, 1], "start_us": [10.0, 10.0], "duration_us": [500.0, 500.0]})
    assert retiming.recoverable_ms(model, retiming.close_windows(model, huge)) == pytest.approx(0.060)


def test_a_slow_rank_is_priced_at_its_peers_median_not_the_fastest_peer():
    """Four ranks meet in one all-reduce (arrivals 30, 40, 50, 80 µs; transit 10, so it ends at 90), then
    work 10, 20, 30 and 60 µs. Rank 3 at its peers' median: it arrives at 40 (the all-reduce now ends at
    60, after rank 2's 50) and works 20 after it; walls 100, 110, 120, 150 become 70, 80, 90, 80: the mean
    step is 120 - 80 = 40 µs shorter. At the fastest peer (30, 10) it would be 42.5."""
    ranks = [0, 1, 2, 3]
    arrivals, tails = [30.0, 40.0, 50.0, 80.0], [10.0, 20.0, 30.0, 60.0]
    walls = [90.0 + tail for tail in tails]
    steps = pd.DataFrame(
        {"rank_id": ranks, "step_ordinal": 0, "step_id": 5, "start_us": 0.0, "end_us": walls, "tail_us": tails}
    )
    alignment = pd.DataFrame(
        {
            "alignment_id": "c0",
            "rank_id": ranks,
            "start_us": arrivals,
            "end_us": 90.0,
            "corrected_start_us": arrivals,
            "corrected_end_us": 90.0,
        }
    )
    model = retiming.build_step_model(alignment, steps)
    assert retiming.step_walls(model).tolist() == [sum(walls) / 4]  # the mean step
    assert retiming.recoverable_ms(model, retiming.at_peer_median(model, 3)) == pytest.approx(0.040)


def test_a_slow_rank_is_also_slow_after_its_last_collective():
    """Rank 1 of the hand-built step also takes 50 µs after the all-reduce where rank 0 takes 30 (a slow
    optimizer): at its peers' median both its work before (30 µs saved) and its tail (20) go."""
    model = two_rank_step()
    slow_tail = replace(model, slots=model.slots.assign(tail_us=[30.0, 50.0]))
    # baseline: walls 100 and 120; what-if: both arrive at 30, leave at 40, end at 70
    assert retiming.recoverable_ms(slow_tail, retiming.at_peer_median(slow_tail, 1)) == pytest.approx(0.040)
    # a change limited to some collectives leaves the tail alone
    only_c0 = retiming.at_peer_median(slow_tail, 1, np.array(["c0"]))
    assert retiming.recoverable_ms(slow_tail, only_c0) == pytest.approx(0.030)


def test_a_step_without_collectives_is_its_own_work():
    steps = pd.DataFrame(
        {"rank_id": [0], "step_ordinal": [0], "step_id": [None], "start_us": [0.0], "end_us": [50.0]}
    ).astype({"step_id": "Int64"})
    model = retiming.build_step_model(pd.DataFrame(), steps)
    assert retiming.step_walls(model).tolist() == [50.0]
    idle = pd.DataFrame({"rank_id": [0], "start_us": [20.0], "duration_us": [15.0]})
    assert retiming.recoverable_ms(model, retiming.close_windows(model, idle)) == pytest.approx(0.015)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_replay_reproduces_every_measured_step(planted_outputs, name):
    """The model is only as good as its baseline: replaying the measured local work and transits gives
    each step's measured wall back (the mean over ranks, as the twins are compared)."""
    _, out = planted_outputs[name]
    model = model_of(out)
    steps = pd.read_csv(out / schema.STEP_SUMMARY.file)
    # a capture without step marks (a serving one) numbers its forwards by ordinal on every rank
    key = steps["step_id"] if steps["step_id"].notna().all() else steps["step_ordinal"]
    measured = steps.groupby(key)["wall_ms"].mean() * 1000.0
    replayed = retiming.step_walls(model)
    assert len(replayed) == len(measured)
    np.testing.assert_allclose(replayed.to_numpy(), measured.reindex(replayed.index).to_numpy(), rtol=0.02, atol=50.0)


@pytest.mark.parametrize("name", sorted({name for name, _ in TWINS}))
def test_the_measured_step_walls_are_the_generators(planted_outputs, name):
    """The twins are measured from ground_truth.json's walls; npuprof's own (step_summary.csv) agree with
    them on each planted root, so a prediction matched to the truth is matched to what npuprof shows."""
    root, out = planted_outputs[name]
    assert mean_wall_ms(out) == pytest.approx(truth_mean_wall_ms(root), rel=0.01)


@pytest.mark.parametrize(("name", "finding_type"), TWINS)
def test_each_finding_recovers_what_its_twin_measures(planted_outputs, tmp_path, name, finding_type):
    root, out = planted_outputs[name]
    measured = twin_measures_ms(root, twin_of(name, finding_type), tmp_path)
    (finding,) = [f for f in reported_findings(out) if f["finding_type"] == finding_type]  # merged ones too
    assert measured > 0.1  # the fault costs something measurable, or the comparison proves nothing
    if knowledge.load("diagnosis_rules")["findings"][finding_type].get("not_recoverable"):
        # a cause the capture cannot recover (the late member is not in it): named with the ms it causes,
        # which its twin measures, and never offered as a saving
        assert finding["recoverable_ms_per_step"] is None
        assert finding["caused_ms_per_step"] == pytest.approx(measured, rel=TOLERANCE)
        return
    assert finding["recoverable_ms_per_step"] == pytest.approx(measured, rel=TOLERANCE)


# the twin the replay priced worst (−18 to −21 % at seeds 0–4 while seed 7 passed, when the exposed last
# gradient bucket of an overlapped sync was scaled with the stage's parameters), checked beyond the test seed
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_the_stage_move_recovers_what_its_twin_measures_at_other_seeds(tmp_path, seed):
    from conftest import analyze_scenarios

    ((root, out),) = analyze_scenarios(tmp_path, ["pipeline_parallel"], "diagnostics", seed=seed).values()
    measured = twin_measures_ms(root, twin_of("pipeline_parallel", "pp_stage_imbalance"), tmp_path)
    (finding,) = [f for f in reported_findings(out) if f["finding_type"] == "pp_stage_imbalance"]
    assert measured > 0.1 and finding["recoverable_ms_per_step"] == pytest.approx(measured, rel=TOLERANCE)


def test_a_fault_that_costs_no_time_recovers_none(planted_outputs):
    """A rank given no routed tokens is wasted capacity, not a longer step (its twin is no faster)."""
    _, out = planted_outputs["dummy_rank"]
    (reduced,) = [f for f in findings_of(out) if f["finding_type"] == "reduced_work_or_dummy_rank"]
    assert reduced["recoverable_ms_per_step"] == 0.0 and reduced["severity"] == "low"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_findings_come_most_recoverable_first_with_severity_by_share(planted_outputs, name):
    _, out = planted_outputs[name]
    findings = findings_of(out)
    rules = knowledge.load("diagnosis_rules")["findings"]
    # a cause whose fix lies outside the capture is not priced, and comes after every priced finding
    causes = [f for f in findings if rules[f["finding_type"]].get("not_recoverable")]
    assert all(f["recoverable_ms_per_step"] is None and f["caused_ms_per_step"] > 0 for f in causes)
    assert findings[len(findings) - len(causes) :] == causes
    findings = findings[: len(findings) - len(causes)]
    saved = [f["recoverable_ms_per_step"] for f in findings]
    assert all(s is not None for s in saved), [
        f["finding_type"] for f in findings if f["recoverable_ms_per_step"] is None
    ]
    assert saved == sorted(saved, reverse=True)
    wall, cut = mean_wall_ms(out), knowledge.load("diagnosis_rules")["severity_by_step_share"]
    for finding in findings:
        share = finding["recoverable_ms_per_step"] / wall
        assert finding["recoverable_share_of_step"] == pytest.approx(share, abs=1e-4)
        assert finding["severity"] == (
            "high" if share >= cut["high"] else "medium" if share >= cut["medium"] else "low"
        )


# scenarios with several planted costs: (scenario, why together differs from the sum)
TOGETHER = [
    ("mixed", "a slow rank and a hot EP rank: fixing one lets the other save more than alone"),
    ("host_stalls", "three stalls in one stretch of work: each removed on its own, all add up"),
    ("slow_dataloader_rank", "a slow-rank symptom of the loader stall: the cause's fix is the symptom's"),
]


@pytest.mark.parametrize(("name", "why"), TOGETHER)
def test_every_finding_fixed_together_is_what_the_capture_without_faults_measures(planted_outputs, tmp_path, name, why):
    """The report's "all findings fixed together" replays every finding's change at once; its twin is the
    same capture with every planted fault removed (capture conditions kept)."""
    root, out = planted_outputs[name]
    planted = SCENARIOS[name]
    kept = tuple(f for f in planted.faults if f.kind in CAPTURE_CONDITIONS)
    measured = twin_measures_ms(root, replace(planted, name=f"{name}_clean", faults=kept), tmp_path)
    together = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["recoverable_together"]
    assert together["ms_per_step"] == pytest.approx(measured, rel=TOLERANCE), why
    # and the plain sum is not what it claims: it differs from the replay where the findings interact
    if name != "host_stalls":
        assert abs(together["sum_ms_per_step"] - measured) > abs(together["ms_per_step"] - measured)
