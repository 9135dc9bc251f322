"""The step ledger: every ms of each rank's step on exactly one line, the lines adding up to the step's
wall on every scenario and real sample, each line explained by a finding, an expected reason or
"unexplained"; a planted fault's finding explains the lines it causes, on its rank and, for a rank
that makes its peers wait, on the peers' wait lines."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import SAMPLE_ROOTS
from helpers.ledger_checks import assert_ledger_adds_up

from npuprof.api import Analysis
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.ledger import CAUSE, UNEXPLAINED, unexplained_share
from npuprof.synth import SCENARIOS

pytestmark = pytest.mark.xdist_group("planted")  # one worker: shares planted_outputs


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_ledger_adds_up_to_the_step_on_every_scenario(planted_outputs, name):
    _, out = planted_outputs[name]
    ledger = assert_ledger_adds_up(out)
    manifest = json.loads((out / schema.stage_manifest_name("diagnostics")).read_text())
    shares = unexplained_share(ledger)
    assert manifest["ledger_unexplained_share"] == {str(r): round(float(v), 4) for r, v in shares.items()}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_planted_fault_explains_lines_on_its_ranks(planted_outputs, name):
    root, out = planted_outputs[name]
    truth = json.loads((root / "ground_truth.json").read_text())
    ledger = Analysis(out).ledger()
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    for expected in truth["expected_findings"]:
        # its own lines, or those its likely cause (a throttled clock for a slow rank) explains for it
        planted = [f for f in findings if f["finding_type"] == expected["type"]]
        claims = {f["claim_id"] for f in planted} | {c["claim_id"] for f in planted for c in f["likely_causes"]}
        # ... or those of the cause it was merged into (one cause, one finding)
        claims |= {f["claim_id"] for f in findings if expected["type"] in {m["finding_type"] for m in f["merged"]}}
        # credited with what its fix recovers, or named the cause of what the capture cannot recover
        mine = ledger[ledger["explained_by"].str.removeprefix(CAUSE).isin(claims)]
        assert len(mine) and mine["ms"].sum() > 0, f"{name}: {expected['type']} explains no ledger line"


@pytest.mark.parametrize("name", ["slow_rank", "throttled_card", "demo"])
def test_the_peers_wait_is_blamed_on_the_slow_rank(planted_outputs, name):
    root, out = planted_outputs[name]
    truth = json.loads((root / "ground_truth.json").read_text())
    (slow,) = [f for f in truth["faults"] if f["kind"] in ("slow_rank_suspected", "aicore_freq_throttled")]
    planted_ranks = {";".join(map(str, f["ranks"])) for f in truth["faults"] if f.get("ranks")}
    ledger = Analysis(out).ledger()
    complete = ledger[ledger["complete"].astype(bool)]
    waits = complete[complete["line"].str.startswith("communication") & complete["line"].str.endswith(" wait")]
    peers = waits[~waits["rank_id"].isin(slow["ranks"])]
    assert len(peers)
    # most of the peers' wait is blamed on the planted ranks they waited for (the slow one's most of all)
    blamed = peers[peers["blamed_ranks"].isin(planted_ranks)]
    assert blamed["ms"].sum() >= 0.8 * peers["ms"].sum(), peers.groupby("explained_by")["ms"].sum()
    on_slow = peers[peers["blamed_ranks"] == ";".join(map(str, slow["ranks"]))]["ms"].sum()
    assert on_slow >= 0.5 * peers["ms"].sum()
    # the slow rank's own compute: what bringing it to its peers' pace removes is the finding's, the
    # rest is the step's compute, expected
    own = complete[complete["rank_id"].isin(slow["ranks"]) & complete["line"].str.startswith("compute ")]
    credited = own[own["finding_type"].notna()]
    assert set(credited["finding_type"]) <= {"slow_rank_suspected", "aicore_freq_throttled"} and len(credited)
    assert (own.loc[own["finding_type"].isna(), "explained_by"].str.startswith("expected:")).all()


CREDIT_TOLERANCE = 0.05  # the bound: a finding's ledger credit on a rank within ±5 % of its saving there


def assert_credit_is_the_saving(out) -> int:
    """Every priced finding's ledger credit, rank by rank, is what its replay saves on that rank (the
    finding's ``recoverable_ms_by_rank``, ms per step) within ±5 %; and those savings average, over the
    ranks of the replay, to its ``recoverable_ms_per_step``. Returns how many (finding, rank) pairs it
    checked."""
    ledger = Analysis(out).ledger()
    document = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())
    steps = ledger.groupby("rank_id")["step_ordinal"].nunique()
    credited = ledger.groupby(["explained_by", "rank_id"])["ms"].sum()
    checked = 0
    for finding in document["diagnosis_findings"]:
        if finding["claim_id"] in document["recoverable_together"]["symptom_claim_ids"]:
            continue  # its likely cause's replay is credited instead
        if (finding["recoverable_ms_per_step"] or 0.0) > 0.01:
            assert finding["recoverable_ms_by_rank"], finding["finding_type"]  # a saving is somewhere
        for rank, saved in finding["recoverable_ms_by_rank"].items():
            got = credited.get((finding["claim_id"], int(rank)), 0.0) / steps[int(rank)]
            assert got == pytest.approx(saved, rel=CREDIT_TOLERANCE, abs=0.01), (finding["finding_type"], rank)
            checked += 1
        if finding["claim_id"] in document["recoverable_together"]["replayed_claim_ids"]:
            mean = sum(finding["recoverable_ms_by_rank"].values()) / len(steps)
            assert mean == pytest.approx(finding["recoverable_ms_per_step"], rel=CREDIT_TOLERANCE, abs=0.01)
    return checked


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_findings_ledger_credit_is_what_its_replay_saves(planted_outputs, name):
    _, out = planted_outputs[name]
    assert_credit_is_the_saving(out)


@pytest.mark.parametrize("name", ["qwen3_training", "text_level1", "db_level1"])
def test_a_findings_ledger_credit_is_what_its_replay_saves_on_real_captures(sample_outputs, name):
    out, _ = sample_outputs[name]
    assert_credit_is_the_saving(out)


# where each planted fault's kernels run (synth/faults.py): the down projection and the FFN's input
# RmsNorm inside the FFN block, the loss after the last layer
PLANTED_KERNELS_RUN_IN = {
    "narrow_matmul": ("block_dim_underuse", "compute ffn"),
    "unfused_rmsnorm": ("unfused_op_pattern", "compute ffn"),
    "eager_loss": ("unfused_loss_chain", "compute outside blocks"),
}


def own_compute_credit(out, finding_type: str) -> pd.Series:
    """ms per compute line the finding of ``finding_type`` is credited with on its own ranks."""
    ledger = Analysis(out).ledger()
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    (finding,) = [f for f in findings if f["finding_type"] == finding_type]
    mine = ledger[(ledger["explained_by"] == finding["claim_id"]) & ledger["rank_id"].isin(finding["rank_ids"])]
    return mine[mine["line"].str.startswith("compute ")].groupby("line")["ms"].sum()


@pytest.mark.parametrize("name", sorted(PLANTED_KERNELS_RUN_IN))
def test_a_kernel_findings_compute_credit_is_on_the_block_its_kernels_ran_in(planted_outputs, name):
    finding_type, line = PLANTED_KERNELS_RUN_IN[name]
    credit = own_compute_credit(planted_outputs[name][1], finding_type)
    assert credit.sum() > 0 and credit.get(line, 0.0) >= 0.99 * credit.sum(), credit


def test_the_real_loss_chains_compute_credit_is_outside_the_layers(sample_outputs):
    # Qwen3 rank 2: the chain's 11 kernels run between the LM head's forward and backward matmuls, after
    # the last decoder layer and before the first one's backward, so the whole saving is on that line
    credit = own_compute_credit(sample_outputs["qwen3_training"][0], "unfused_loss_chain")
    assert list(credit.index) == ["compute outside blocks"] and credit.sum() > 0, credit


@pytest.mark.parametrize("name", sorted(SAMPLE_ROOTS))
def test_the_ledger_adds_up_on_every_real_sample(sample_outputs, name):
    out, _ = sample_outputs[name]
    if len(pd.read_csv(out / schema.STEP_SUMMARY.file)):
        assert_ledger_adds_up(out)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_step_has_a_critical_path_as_long_as_the_step(planted_outputs, name):
    _, out = planted_outputs[name]
    path = pd.read_csv(out / schema.CRITICAL_PATH_CSV.file)
    steps = pd.read_csv(out / schema.STEP_SUMMARY.file)
    key = "step_id" if steps["step_id"].notna().all() else "step_ordinal"
    walls = steps.groupby(key)["wall_ms"].agg(["min", "max"])
    length = path.groupby("step_key")["ms"].sum()
    assert sorted(length.index) == sorted(walls.index)
    assert ((length >= 0.9 * walls["min"]) & (length <= 1.1 * walls["max"])).all(), pd.concat([length, walls], axis=1)
    assert set(path["segment"]) <= {"work", "transit", "tail"}
    assert (path.groupby("step_key")["position"].apply(lambda p: list(p) == list(range(len(p))))).all()


@pytest.mark.parametrize(
    ("name", "kind"), [("slow_rank", "slow_rank_suspected"), ("launch_bound_rank", "host_launch_bound")]
)
def test_the_critical_path_runs_through_the_planted_rank(planted_outputs, name, kind):
    root, out = planted_outputs[name]
    (fault,) = [f for f in json.loads((root / "ground_truth.json").read_text())["faults"] if f["kind"] == kind]
    path = pd.read_csv(out / schema.CRITICAL_PATH_CSV.file)
    work = path[path["segment"] == "work"]
    share = work[work["rank_id"].isin(fault["ranks"])]["ms"].sum() / work["ms"].sum()
    assert share >= 0.9, work.groupby("rank_id")["ms"].sum()


def test_an_unexplained_wait_is_blamed_on_the_member_that_arrived_last():
    from npuprof.pipeline.stages.diagnostics.ledger import blame_waits, last_arrivers

    ledger = pd.DataFrame(
        {
            "rank_id": [0, 1, 1],
            "step_id": [7, 7, 7],
            "step_ordinal": [0, 0, 0],
            "line": ["compute ffn", "communication DP allreduce wait", "communication TP allreduce wait"],
            "ms": [5.0, 4.0, 1.0],
            "explained_by": ["expected:the step's compute", UNEXPLAINED, UNEXPLAINED],
            "blamed_ranks": [None, None, None],
        }
    )
    alignment = pd.DataFrame(
        {  # c0 (DP): rank 1 waits 4 ms for rank 0; c1 (TP): rank 1 waits for rank 2; c2: nobody waits
            "alignment_id": ["c0", "c0", "c1", "c1", "c2", "c2"],
            "rank_id": [0, 1, 1, 2, 0, 1],
            "step_id": [7] * 6,
            "kind": ["allreduce"] * 6,
            "parallel_role": ["DP", "DP", "TP", "TP", "DP", "DP"],
            "late_by_us": [0.0, 4000.0, 1000.0, 0.0, 0.0, 0.0],
        }
    )
    blamed = blame_waits(ledger, last_arrivers(alignment))
    assert blamed["blamed_ranks"].tolist() == [None, "0", "2"]
