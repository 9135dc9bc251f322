"""syncbn: the host's SyncBatchNorm calls and the collectives launched inside them (launch_scopes), priced
by the replay without those collectives; plain BatchNorm's stem, the same kernels without them, is silent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.planted import planted_finding

from npuprof.pipeline import schema
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.stages.diagnostics.detectors.syncbn import FINDING
from npuprof.pipeline.stages.evidence.launch_scopes import scope_spans, scoped_launches
from npuprof.synth import SCENARIOS, generate
from npuprof.synth.twins import twin_of

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs


def _host(spans: list[tuple[str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(spans, columns=["name", "start_us", "end_us"])


def test_framework_ops_are_matched_by_name_in_any_case():
    host = _host(
        [
            ("SyncBatchNorm", 0.0, 10.0),
            ("autograd::engine::evaluate_function: SyncBatchNormBackward", 20.0, 30.0),
            ("aten::batch_norm", 40.0, 50.0),  # plain BatchNorm: not a scope
            ("torch/nn/modules/_functions.py(13): syncbatchnorm_forward", 60.0, 70.0),
        ]
    )
    spans = scope_spans(host)
    assert spans["start_us"].tolist() == [0.0, 20.0, 60.0] and set(spans["scope"]) == {"SyncBatchNorm"}


def test_a_kernel_belongs_to_the_span_its_launch_falls_in():
    host = _host([("SyncBatchNorm", 0.0, 10.0), ("SyncBatchNorm", 20.0, 30.0)])
    events = pd.DataFrame(
        {"row_idx": [0, 1, 2, 3], "start_ns": [5_000, 15_000, 25_000, 40_000], "name": list("abcd")}
    ).assign(step_ordinal=0)
    launched = scoped_launches(events, np.array([4.0, 15.0, 29.0, np.nan]), host)  # b between, d unknown
    assert launched["name"].tolist() == ["a", "c"]
    assert launched["span_start_ns"].tolist() == [0, 20_000]


def test_the_planted_syncbn_is_found_with_its_calls_and_collectives(planted_outputs):
    planted = planted_finding(planted_outputs, "syncbn_vision", FINDING)
    out, truth, finding = planted.out, planted.truth, planted.finding
    scenario = SCENARIOS["syncbn_vision"]
    per_step = 2 * scenario.vision_blocks * scenario.micro_batches  # every BatchNorm, forward and backward
    assert finding["rank_ids"] == sorted(int(r) for r in truth["ranks"])
    assert finding["metrics"]["calls_per_step"] == per_step
    assert finding["metrics"]["collectives_per_step"] == per_step
    assert finding["metrics"]["kinds"] == f"{per_step // 2} allgather, {per_step // 2} allreduce"
    alignment = pd.read_parquet(out / schema.COLLECTIVE_ALIGNMENT.path)
    cited = alignment[alignment["evidence_id"].isin(finding["evidence_ids"])]
    assert len(cited) and set(cited["kind"]) <= {"allgather", "allreduce"}
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    explained = set(ledger.loc[ledger["finding_type"] == FINDING, "line"])  # the all-gathers' every part
    assert "communication DP allgather transfer" in explained
    # its replay removes the SyncBN collectives (all-gathers and all-reduces of the statistics) and the
    # waits behind them: only DP all-gather and all-reduce lines
    assert {line.rsplit(" ", 1)[0] for line in explained} <= {
        "communication DP allgather",
        "communication DP allreduce",
    }


def test_plain_batchnorm_is_silent_and_a_run_without_the_host_trace_is_not_judged(tmp_path):
    twin = twin_of("syncbn_vision", FINDING)
    root = Path(generate(tmp_path / "root", twin, seed=7)["root"])
    analyze(root, tmp_path / "out", jobs=2)
    found = json.loads((tmp_path / "out" / schema.DIAGNOSIS_FINDINGS).read_text())
    assert not [f for f in found["diagnosis_findings"] if f["finding_type"] == FINDING]
    assert not len(pd.read_parquet(tmp_path / "out" / schema.LAUNCH_SCOPES.path))  # no SyncBatchNorm span
    analyze(root, tmp_path / "bare", jobs=2, options=AnalyzeOptions(host_trace=False))
    unjudged = json.loads((tmp_path / "bare" / schema.DIAGNOSIS_FINDINGS).read_text())["not_judged"]
    assert FINDING in {u["finding_type"] for u in unjudged}


def test_a_db_capture_that_links_no_collective_to_its_launch_is_not_judged(tmp_path):
    """The synthetic db, like torch_npu's, links compute tasks to their launches (TASK ↔ CANN_API) but not the
    collectives: the calls and their statistics kernels are found, what they cost is not measured."""
    root = Path(generate(tmp_path / "root", "syncbn_vision", seed=7, export="db")["root"])
    analyze(root, tmp_path / "out", jobs=2)
    found = json.loads((tmp_path / "out" / schema.DIAGNOSIS_FINDINGS).read_text())
    assert not [f for f in found["diagnosis_findings"] if f["finding_type"] == FINDING]
    (reason,) = [u["reason"] for u in found["not_judged"] if u["finding_type"] == FINDING]
    scenario = SCENARIOS["syncbn_vision"]
    assert f"{2 * scenario.vision_blocks * scenario.micro_batches} SyncBatchNorm calls per step" in reason
    launched = pd.read_parquet(tmp_path / "out" / schema.LAUNCH_SCOPES.path)
    assert len(launched) and launched["name"].str.contains("BNTraining").all()  # the kernels, not the collectives
