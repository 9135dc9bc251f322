"""small_packet_collective: small collectives back to back on one communicator are found, their start
(latency) measured against the communicator's large ops, and priced as the starts bucketing drops; ops
with a layer's work between them, and large ops, are not a run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers.planted import planted_finding

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.collective_sizes import sized_ops
from npuprof.pipeline.stages.diagnostics.detectors.small_packets import FINDING, latencies, small_runs

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

RULES = knowledge.load("diagnosis_rules")["findings"][FINDING]
LATENCY_US = 50.0
GBPS = 100.0  # MB per ms


def _ops(sizes_mb: list[float], gaps_us: list[float], kind: str = "allreduce", rank: int = 0) -> tuple:
    """One rank's collectives in a row: each ``LATENCY_US`` + its bytes at ``GBPS``, the local work before
    each ``gaps_us``; as (alignment rows, communication_ops rows)."""
    rows, ops, clock = [], [], 0.0
    for index, (size, gap) in enumerate(zip(sizes_mb, gaps_us, strict=True)):
        transit = LATENCY_US + size / GBPS * 1e3
        name = f"hcom_allReduce__503_{index}_1"
        start = clock + gap
        rows.append(
            {
                "alignment_id": f"c{index}",
                "rank_id": rank,
                "step_id": 1,
                "name": name,
                "kind": kind,
                "parallel_role": "DP",
                "member_count": 2,
                "start_us": start,
                "end_us": start + transit,
                "transit_us": transit,
                "evidence_id": f"r{rank}.comm{index}",
            }
        )
        ops.append({"rank_id": rank, "op_name": name, "transit_ms": transit / 1e3, "hccs_size_mb": size})
        clock = start + transit
    return pd.DataFrame(rows), pd.DataFrame(ops)


def test_the_latency_is_what_a_small_op_leaves_after_its_bytes_at_the_large_ops_bandwidth():
    alignment, comm_ops = _ops([0.001, 0.5, 2.0, 200.0, 200.0], [10.0] * 5)
    ops = sized_ops(alignment, comm_ops)
    table = latencies(ops, (ops["size_mb"] < RULES["small_mb"]).to_numpy())
    (row,) = table.itertuples(index=False)
    assert row.latency_us == pytest.approx(LATENCY_US, rel=0.02) and row.against_large
    # without a large op the smallest op's whole transit stands for it: an upper bound
    alignment, comm_ops = _ops([0.001, 0.5, 2.0], [10.0] * 3)
    ops = sized_ops(alignment, comm_ops)
    (row,) = latencies(ops, np.ones(len(ops), dtype=bool)).itertuples(index=False)
    assert row.latency_us == pytest.approx(LATENCY_US + 0.001 / GBPS * 1e3) and not row.against_large


def test_a_run_is_small_ops_of_one_communicator_with_less_work_between_them_than_a_start():
    short, long = 0.3 * LATENCY_US, 3.0 * LATENCY_US  # a norm kernel between two ops; a layer's work
    sizes = [200.0] + [0.004] * 10 + [0.004] * 10 + [20.0] * 10
    gaps = [10.0] + [short] * 10 + [long] * 10 + [short] * 10
    alignment, comm_ops = _ops(sizes, gaps)
    runs = small_runs(sized_ops(alignment, comm_ops), RULES)
    # the ten tiny ops close together are one run; the ten with a layer between them are none, nor are
    # the 20 MB ops (not small) or the first of the far ones (its gap is to the run before)
    assert runs["alignment_id"].tolist() == [f"c{i}" for i in range(1, 11)]
    assert runs["run"].nunique() == 1
    # fewer than min_ops in a row is no run
    alignment, comm_ops = _ops([200.0] + [0.004] * (RULES["min_ops"] - 1), [10.0] + [short] * (RULES["min_ops"] - 1))
    assert small_runs(sized_ops(alignment, comm_ops), RULES).empty


def test_the_planted_per_tensor_norm_all_reduces_are_found_with_their_start(planted_outputs):
    planted = planted_finding(planted_outputs, "small_packets", FINDING)
    truth, finding, out = planted.truth, planted.finding, planted.out
    assert finding["rank_ids"] == sorted(int(r) for r in truth["ranks"])
    metrics = finding["metrics"]
    # synth's norm: 9 parameter tensors per layer, each all-reduced alone (4 bytes) over data parallel
    assert metrics["ops_per_step"] == pytest.approx(9 * truth["workload"]["layers"])
    assert (metrics["role"], metrics["kind"]) == ("DP", "allreduce")
    assert metrics["latency_us"] == pytest.approx(200.0, rel=0.05)  # synth's all-reduce start
    assert metrics["median_size"] == "4 B" and metrics["buckets_per_run"] == 1
    assert finding["confidence"] == "medium"  # measured against the gradient buckets' bandwidth
    events = pd.read_parquet(out / schema.COMMUNICATION_EVENTS.path, columns=["evidence_id", "name", "kind"])
    quoted = events[events["evidence_id"].isin(finding["evidence_ids"])]
    assert len(quoted) == len(finding["evidence_ids"]) and set(quoted["kind"]) == {"allreduce"}
    # the ledger names it on the DP all-reduce transfer of every rank
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    explained = ledger[ledger["finding_type"] == FINDING]
    assert set(explained["line"]) == {"communication DP allreduce transfer"}
    assert set(explained["rank_id"]) == set(finding["rank_ids"])


@pytest.mark.parametrize("name", ["clean", "clean_inference", "exposed_grad_allreduce", "launch_blocking"])
def test_large_buckets_and_decode_all_reduces_with_work_between_them_are_not_small_packets(planted_outputs, name):
    """The gradient buckets are large; tensor-parallel all-reduces (8 MB in prefill, 128 KB per decode
    token batch) have a layer's work between them."""
    _, out = planted_outputs[name]
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    assert not [f for f in findings if f["finding_type"] == FINDING]
