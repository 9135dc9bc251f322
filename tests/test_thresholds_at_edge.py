"""Thresholds at their edge: a fault planted just past a documented threshold is reported and the same
fault just short of it is not. The planted sizes are the documented contract (a link at under half its
peers' bandwidth is slow), not read from knowledge/, so a rule moved there — or a comparison turned
around in a detector — fails a test that names it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from npuprof.pipeline import schema
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.stage_range import StageRange
from npuprof.pipeline.stages.diagnostics.findings import rule
from npuprof.synth import SCENARIOS, generate
from npuprof.synth.faults import Fault
from npuprof.synth.scenarios import Scenario

TO_FINDINGS = StageRange(to_stage="diagnostics")


def findings_of(scenario: Scenario, work: Path) -> list[dict]:
    """The findings of ``scenario`` generated (seed 3) and analyzed up to diagnostics under ``work``."""
    root = Path(generate(work / scenario.name, scenario, seed=3)["root"])
    analyze(root, work / f"{scenario.name}_out", jobs=2, stage_range=TO_FINDINGS)
    return json.loads((work / f"{scenario.name}_out" / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]


@pytest.mark.parametrize(("share", "reported"), [(0.45, True), (0.55, False)])
def test_a_link_is_slow_under_half_the_bandwidth_of_comparable_links(tmp_path, share, reported):
    """slow_link_suspected (bandwidth_ratio_max 0.5): the 0-1 link at 45 % of its peers' bandwidth is
    named, at 55 % it is not."""
    planted = replace(
        SCENARIOS["slow_link"],
        name=f"link_at_{share:.2f}",
        faults=(Fault("slow_link_suspected", link=(0, 1), factor=1.0 / share),),
    )
    slow = [f for f in findings_of(planted, tmp_path) if f["finding_type"] == "slow_link_suspected"]
    assert bool(slow) == reported, [f["summary"] for f in slow]
    if reported:
        (finding,) = slow
        assert sorted(finding["rank_ids"]) == [0, 1]
        assert finding["statistic"]["value"] == pytest.approx(share, abs=0.04)


def _one_collective(low_us: float, peers_us: list[float]) -> pd.DataFrame:
    """One collective instance whose rank 0 took ``low_us`` (it arrived last) and its peers ``peers_us``."""
    durations = [low_us, *peers_us]
    return pd.DataFrame({"alignment_id": "a0", "rank_id": range(len(durations)), "duration_us": durations})


@pytest.mark.parametrize(("z", "voted"), [(5.0, True), (3.0, False)])
def test_a_late_member_of_sixteen_is_voted_past_a_robust_z_of_three_and_a_half(z, voted):
    """slow_rank_suspected, over 10 members (robust_z_min 3.5): peers at 4000 µs ×7, 4040, 4080 µs ×7 have
    a median of 4020 (with the late one) and a MAD of 40 (σ 59.3 µs); the late member at z = 5 is voted,
    at z = 3 it is not (each waited on by more than min_imposed_wait_us)."""
    from npuprof.pipeline.stages.diagnostics.detectors.slow_rank import _votes

    low = 4020.0 - z * 40.0 * 1.4826
    votes = _votes(_one_collective(low, [4000.0] * 7 + [4040.0] + [4080.0] * 7), rule("slow_rank_suspected"))
    (vote,) = votes.to_dict("records")
    assert vote["test"] == "robust_z" and vote["rank_id"] == 0 and vote["statistic"] == pytest.approx(z)
    assert vote["outlier"] == voted


@pytest.mark.parametrize(("q", "voted"), [(0.70, True), (0.55, False)])
def test_a_late_member_of_six_is_voted_past_dixons_q_at_95_percent(q, voted):
    """... of 6 members, Dixon's Q at 95 % (0.625): (second − lowest) / (highest − lowest) of 0.70 is voted,
    0.55 is not."""
    from npuprof.pipeline.stages.diagnostics.detectors.slow_rank import _votes

    peers = [6000.0, 6030.0, 6060.0, 6090.0, 6120.0]
    low = (peers[0] - q * peers[-1]) / (1.0 - q)
    (vote,) = _votes(_one_collective(low, peers), rule("slow_rank_suspected")).to_dict("records")
    assert vote["test"] == "dixon_q" and vote["statistic"] == pytest.approx(q)
    assert vote["outlier"] == voted
