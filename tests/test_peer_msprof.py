"""Vendor acceptance: msprof-analyze 26.2.0 (in its own venv, never our dependency) reads synth roots.

The tool exits 0 even when it fails, so these tests check its output files and its log.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import SAMPLE_ROOTS, copy_sample
from peer_tool import peer_executable, run_cluster

from npuprof.pipeline import schema
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.synth import SCENARIOS, generate

pytestmark = [pytest.mark.peer, pytest.mark.xdist_group("peer")]


@pytest.fixture(scope="session")
def msprof_analyze() -> Path:
    return peer_executable()


def problems(log: str) -> list[str]:
    """WARNING / ERROR lines other than the tool's note about running as root."""
    return [
        line
        for line in log.splitlines()
        if re.search(r"\[(WARNING|ERROR)\]", line) and "Do not run this tool as root" not in line
    ]


def planted_groups(root: Path) -> dict[str, set[tuple[int, ...]]]:
    """Communicator member sets by kind (dp, tp, pp, exp), from the generated profiler_metadata.json."""
    groups: dict[str, set[tuple[int, ...]]] = {}
    for path in root.glob("*_ascend_pt/profiler_metadata.json"):
        for info in json.loads(path.read_text())["parallel_group_info"].values():
            if info["group_name"] != "default_group":
                groups.setdefault(info["group_name"], set()).add(tuple(info["global_ranks"]))
    return groups


@pytest.mark.parametrize(
    "name", ["clean", "slow_rank", "ep_imbalance", "partial_capture", "mixed", "slow_link", "pipeline_parallel"]
)
def test_msprof_analyze_accepts_text_roots(msprof_analyze, tmp_path, name):
    root = Path(generate(tmp_path / name, name, seed=1)["root"])
    log = run_cluster(msprof_analyze, root)
    assert not problems(log), problems(log)
    out = root / "cluster_analysis_output"
    sc = SCENARIOS[name]
    truth = json.loads((root / "ground_truth.json").read_text())
    groups = planted_groups(root)
    collective = {g for kind, members in groups.items() if kind != "pp" for g in members}

    with open(out / "cluster_step_trace_time.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    rank_rows = [r for r in rows if r["Type"] == "rank"]
    assert {int(r["Index"]) for r in rank_rows} == set(range(sc.ranks))
    assert {int(r["Step"]) for r in rank_rows} == set(truth["step_ids"])
    assert {"DP Index", "PP Index", "TP Index"} <= set(rows[0])  # distributed_args were consistent
    stage_rows = {r["Index"] for r in rows if r["Type"] == "stage"}
    if sc.pp > 1:  # the vendor finds the pipeline stages from the pp groups
        assert stage_rows == {
            str(tuple(range(s * sc.ranks // sc.pp, (s + 1) * sc.ranks // sc.pp))) for s in range(sc.pp)
        }

    communication = json.loads((out / "cluster_communication.json").read_text())
    for members in collective:
        ops = [op for step in communication[str(members)].values() for op in step if not op.startswith("Total")]
        assert ops, f"collective ops of group {members} must be aligned across its ranks"

    matrix = json.loads((out / "cluster_communication_matrix.json").read_text())
    first = sorted(collective)[0]
    links = [link for step in matrix[str(first)].values() for op in step.values() for link in op]
    assert f"{first[0]}-{first[1 % len(first)]}" in links  # local links mapped to global ranks through the self links

    found = json.loads((out / "communication_group.json").read_text())
    assert {tuple(g) for g in found["collective"]} == collective
    assert {tuple(g) for g in found["p2p"]} == groups.get("pp", set())
    assert {g["pg_name"] for g in found["comm_group_parallel_info"]} == set(groups)


def test_slow_rank_waits_show_in_the_vendor_communication_summary(msprof_analyze, tmp_path):
    root = Path(generate(tmp_path / "slow", "slow_rank", seed=1)["root"])
    run_cluster(msprof_analyze, root)
    communication = json.loads((root / "cluster_analysis_output" / "cluster_communication.json").read_text())
    slow = json.loads((root / "ground_truth.json").read_text())["faults"][0]["ranks"][0]
    waits = {}
    for step in communication["(0, 1, 2, 3)"].values():
        for op, per_rank in step.items():
            if op.startswith("Total"):
                continue
            for rank, info in per_rank.items():
                waits[int(rank)] = waits.get(int(rank), 0.0) + info["Communication Time Info"]["Wait Time(ms)"]
    assert min(waits, key=waits.get) == slow, waits  # the slow rank is the one nobody waits for... it waits least


def test_vendor_slow_rank_recipe_ranks_the_planted_rank_first_on_the_db_export(msprof_analyze, tmp_path):
    root = Path(generate(tmp_path / "slowdb", "slow_rank", seed=1, export="db")["root"])
    log = run_cluster(msprof_analyze, root, "slow_rank")
    assert not problems(log), problems(log)
    with open(root / "cluster_analysis_output" / "SlowRankAnalysis" / "rank_stats.csv", newline="") as handle:
        stats = sorted(csv.DictReader(handle), key=lambda r: -int(r["slowAffectCount"]))
    planted = json.loads((root / "ground_truth.json").read_text())["faults"][0]["ranks"][0]
    assert int(stats[0]["rankId"]) == planted


def test_vendor_all_mode_reads_the_db_export(msprof_analyze, tmp_path):
    import sqlite3

    root = Path(generate(tmp_path / "alldb", "mixed", seed=1, export="db")["root"])
    log = run_cluster(
        msprof_analyze, root, "all", export_type=None
    )  # db output: text would split the group map (spec §4)
    assert not problems(log), problems(log)
    con = sqlite3.connect(root / "cluster_analysis_output" / "cluster_analysis.db")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"ClusterCommunicationTime", "ClusterStepTraceTime", "CommunicationGroupMapping"} <= tables
    assert con.execute("SELECT COUNT(DISTINCT rank_id) FROM ClusterCommunicationTime").fetchone()[0] == 4
    con.close()


@pytest.mark.parametrize("name", ["slow_rank", "mixed"])
def test_npuprof_and_the_vendor_agree_on_the_slow_rank(msprof_analyze, tmp_path, name):
    """The same db root through both tools: the vendor's most-voted slow rank is npuprof's finding."""
    from npuprof.pipeline.runner import analyze

    root = Path(generate(tmp_path / name, name, seed=1, export="db")["root"])
    log = run_cluster(msprof_analyze, root, "slow_rank")
    assert not problems(log), problems(log)
    with open(root / "cluster_analysis_output" / "SlowRankAnalysis" / "rank_stats.csv", newline="") as handle:
        votes = {int(r["rankId"]): int(r["slowAffectCount"]) for r in csv.DictReader(handle)}
    analyze(root, tmp_path / "out", jobs=2)
    findings = json.loads((tmp_path / "out" / "diagnosis_findings.json").read_text())["diagnosis_findings"]
    ours = [f["rank_ids"] for f in findings if f["finding_type"] == "slow_rank_suspected"]
    faults = json.loads((root / "ground_truth.json").read_text())["faults"]
    planted = next(f for f in faults if f["kind"] == "slow_rank_suspected")
    assert ours == [planted["ranks"]]
    assert planted["ranks"][0] in votes and votes[planted["ranks"][0]] == max(votes.values()), votes


def test_the_device_copies_are_the_vendors_memory_time_on_the_real_db_capture(msprof_analyze, tmp_path):
    """cluster_time_summary's Memory is the TASK table's MEMCPY_ASYNC time in the step, and its "Memory Not
    Overlap Computation Communication" the part no kernel or collective covers: our device_copies and our
    idle cause ``copy`` on the same real capture."""
    source, _ = SAMPLE_ROOTS["db_level2"]
    root = copy_sample(source, tmp_path / "root")
    log = run_cluster(msprof_analyze, root, "cluster_time_summary")
    assert not problems(log), problems(log)
    (summary,) = (root / "cluster_analysis_output" / "ClusterTimeSummary").glob("cluster_time_summary_*.csv")
    vendor = pd.read_csv(summary).set_index("Rank")
    analyze(source, tmp_path / "out", jobs=2, stage_range=StageRange(to_stage="evidence"))
    copies = pd.read_parquet(tmp_path / "out" / schema.DEVICE_COPIES)
    gaps = pd.read_parquet(tmp_path / "out" / schema.HOST_IDLE_GAPS)
    for rank in vendor.index:  # each rank's one step
        mine = copies[copies["rank_id"].astype(int) == rank]["duration_us"].sum()
        exposed = gaps[gaps["rank_id"].astype(int) == rank]["copy_us"].sum()
        assert mine == pytest.approx(vendor.loc[rank, "Memory(us)"], rel=0.002)
        assert exposed == pytest.approx(vendor.loc[rank, "Memory Not Overlap Computation Communication(us)"], abs=1.0)
