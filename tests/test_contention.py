"""bandwidth_contention: the same collectives run slower beside compute than alone; the slowdown is
measured from the share of each instance's life with compute beside it, and priced only where the step
waits for it."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.planted import planted_finding

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.detectors.contention import FINDING, beside_shares, slowdowns

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

RULES = knowledge.load("diagnosis_rules")["findings"][FINDING]
ALONE_US = 1000.0


def _instances(work_beside: list[float], slowdown: float, size_mb: float = 100.0) -> pd.DataFrame:
    """Instances of one family, each doing a share of its work beside compute at 1 / ``slowdown`` of the
    speed alone (``ALONE_US`` for all of it alone)."""
    rows = []
    for index, share in enumerate(work_beside):
        # work done beside at 1 / slowdown of the speed: s·T·slowdown of time, the rest alone
        alone_part = ALONE_US * (1 - share)
        beside_time = ALONE_US * share * slowdown
        transit = alone_part + beside_time
        rows.append(
            {
                "alignment_id": f"c{index}",
                "rank_id": 0,
                "step_id": index,
                "parallel_role": "DP",
                "kind": "allreduce",
                "duration_us": transit,
                "transit_us": transit,
                "compute_beside_us": beside_time,
                "size_mb": size_mb,
            }
        )
    return pd.DataFrame(rows)


def test_the_slowdown_is_measured_from_each_instance_s_share_beside_compute():
    ops = beside_shares(_instances([0.0, 0.0, 1.0, 0.8, 0.6], slowdown=2.5))
    (family,) = slowdowns(ops, RULES).itertuples(index=False)
    assert family.alone_us == pytest.approx(ALONE_US, rel=0.05)
    assert family.slowdown == pytest.approx(2.5) and family.beside_count == 3
    # without two instances alone there is nothing to measure against
    assert slowdowns(beside_shares(_instances([0.0, 1.0, 0.9], slowdown=2.5)), RULES).empty


def test_instances_of_other_sizes_are_not_each_others_yardstick():
    small = _instances([0.0, 0.0], slowdown=1.0, size_mb=1.0)
    large = _instances([1.0, 1.0], slowdown=1.0, size_mb=100.0).assign(transit_us=50_000.0, duration_us=50_000.0)
    assert slowdowns(beside_shares(pd.concat([small, large], ignore_index=True)), RULES).empty


def test_the_planted_slow_buckets_beside_the_backward_are_found(planted_outputs):
    planted = planted_finding(planted_outputs, "contended_buckets", FINDING)
    out, truth, fault, finding = planted.out, planted.truth, planted.fault, planted.finding
    assert finding["rank_ids"] == sorted(int(r) for r in truth["ranks"])
    assert (finding["metrics"]["role"], finding["metrics"]["kind"]) == ("DP", "allreduce")
    assert finding["statistic"]["value"] == pytest.approx(1 / fault["factor"], rel=0.1)
    assert finding["metrics"]["alone_gbps"] == pytest.approx(
        fault["factor"] * finding["metrics"]["beside_gbps"], rel=0.15
    )
    cited = pd.read_parquet(
        out / schema.COLLECTIVE_ALIGNMENT.path, columns=["evidence_id", "compute_beside_us", "duration_us"]
    )
    cited = cited[cited["evidence_id"].isin(finding["evidence_ids"])]
    assert len(cited) and (cited["compute_beside_us"] >= 0.5 * cited["duration_us"]).all()
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    assert set(ledger.loc[ledger["finding_type"] == FINDING, "line"]) == {"communication DP allreduce transfer"}


@pytest.mark.parametrize("name", ["clean", "zero_overlapped", "exposed_grad_allreduce", "small_packets"])
def test_buckets_as_fast_beside_compute_as_alone_are_no_contention(planted_outputs, name):
    _, out = planted_outputs[name]
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    assert not [f for f in findings if f["finding_type"] == FINDING]
