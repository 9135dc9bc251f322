"""rdma_retransmission: an op over RDMA that ran a whole retransmission timeout past the same op's
median is found, its timeout taken from the recorded HCCL_RDMA_TIMEOUT (else HCCL's default), and named
as the cause of the slow collective it makes."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.planted import planted_finding

from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.detectors.retransmission import FINDING, QP_TIMEOUT_UNIT_US, timeout_us
from npuprof.synth.faults import RDMA_TIMEOUT_EXPONENT

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs


def test_the_timeout_is_the_recorded_exponent_or_hccl_s_default():
    env = {0: {"HCCL_RDMA_TIMEOUT": "14"}, 1: {"HCCL_RDMA_TIMEOUT": "16"}, 2: {"HCCL_RDMA_TIMEOUT": ""}}
    assert timeout_us(env, [0, 1], 20) == (QP_TIMEOUT_UNIT_US * 2**14, "HCCL_RDMA_TIMEOUT=14 recorded")
    timeout, source = timeout_us(env, [2], 20)
    assert timeout == pytest.approx(4.294967e6) and "default 20" in source


def test_the_planted_retransmission_is_found_and_causes_the_slow_send_recv(planted_outputs):
    planted = planted_finding(planted_outputs, "rdma_retransmission", FINDING)
    out, fault, findings, finding = planted.out, planted.fault, planted.findings, planted.finding
    metrics = finding["metrics"]
    assert (metrics["kind"], metrics["role"], metrics["count"], metrics["retries"]) == ("send_recv", "PP", 1, 1)
    assert metrics["timeout_ms"] == pytest.approx(fault["gap_us"] / 1e3)
    assert metrics["timeout_ms"] == pytest.approx(QP_TIMEOUT_UNIT_US * 2**RDMA_TIMEOUT_EXPONENT / 1e3)
    # the op is a send / recv of one pipeline pair, in the planted step
    alignment = pd.read_parquet(out / schema.COLLECTIVE_ALIGNMENT.path)
    instance = alignment[alignment["alignment_id"].isin(finding["alignment_ids"])]
    assert sorted(instance["rank_id"].unique()) == finding["rank_ids"] and len(finding["rank_ids"]) == 2
    step_ids = sorted(alignment["step_id"].dropna().unique())
    assert set(instance["step_id"]) == {step_ids[fault["step_ordinals"][0]]}
    (slow,) = [f for f in findings if f["finding_type"] == "communication_collective_slow"]
    assert [c["finding_type"] for c in slow["likely_causes"]] == [FINDING]
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    assert "communication PP send_recv transfer" in set(ledger.loc[ledger["finding_type"] == FINDING, "line"])
