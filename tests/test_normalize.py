"""normalize end to end through the real CLI, on every real sample root."""

from __future__ import annotations

import collections
import csv
import json
import re
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from conftest import PYTORCH_DATA, QWEN_TRAINING, SAMPLE_ROOTS

from npuprof.api import Analysis
from npuprof.pipeline import schema


def expected_event_count(root) -> int:
    """Data rows of each rank's kernel source, counted without npuprof: CSV rows, or db compute + comm rows."""
    total = 0
    for db in root.rglob("*.db"):
        if db.name == "analysis.db":
            continue
        con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
        total += con.execute(
            "SELECT COUNT(*) FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId"
        ).fetchone()[0]
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "COMMUNICATION_OP" in tables:
            total += con.execute("SELECT COUNT(*) FROM COMMUNICATION_OP").fetchone()[0]
        con.close()
    if total:
        return total
    for path in [*root.rglob("kernel_details.csv"), *root.rglob("op_summary*.csv")]:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.reader(handle))
        well_formed = [tuple(r) for r in rows[1:] if len(r) == len(rows[0])]  # malformed rows are quarantined
        total += len(set(well_formed))  # a row repeated exactly is one event (the repeats are counted in notes)
    return total


def repeated_rows(root) -> int:
    """Rows of the kernel CSVs that repeat an earlier row exactly, counted without npuprof."""
    repeats = 0
    for path in [*root.rglob("kernel_details.csv"), *root.rglob("op_summary*.csv")]:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            rows = [tuple(r) for r in list(csv.reader(handle))[1:]]
        repeats += len(rows) - len(set(rows))
    return repeats


@pytest.mark.parametrize("name", sorted(SAMPLE_ROOTS))
def test_every_sample_root_normalizes_with_the_right_counts(cli, tmp_path, name):
    root, rank_count = SAMPLE_ROOTS[name]
    out = tmp_path / "out"
    run = cli("analyze", str(root), "-o", str(out), "--to-stage", "normalize", "--progress", "none")
    assert run.returncode == 0, run.stderr
    result = run.result
    assert result["status"] == "ok"
    assert result["rank_count"] == rank_count
    assert result["event_count"] == expected_event_count(root)
    events = pd.read_parquet(out / schema.NORMALIZED_EVENTS)
    assert len(events) == result["event_count"]
    assert set(events.columns) == set(schema.EVENT_COLUMNS) | {"rank_id"}
    assert (events["end_ns"] - events["start_ns"] == events["duration_ns"]).all()
    manifest = json.loads((out / "normalize_manifest.json").read_text())
    assert sum(r["event_count"] for r in manifest["rank_summaries"]) == result["event_count"]
    if not any(root.rglob("*.db")):
        assert sum(r["duplicate_rows_dropped"] for r in manifest["rank_summaries"]) == repeated_rows(root)
    assert json.loads((out / "manifest.json").read_text())["stage_timings"]["normalize"] > 0


def _strip_group_hash(name: str) -> str:
    # hcom_allReduce__586_0_1: the 3 digits are the group hash of that capture, not the kernel.
    return re.sub(r"^(hcom_\w+?__)\d+(_\d+_\d+)$", r"\1G\2", name)


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_db_and_text_captures_of_one_level_agree_on_kernels_and_op_types(tmp_path, level):
    from npuprof.pipeline.runner import analyze

    per_export = {}
    for export in ("text", "db"):
        out = tmp_path / export
        analyze(PYTORCH_DATA / export / level, out, jobs=1)
        events = Analysis(out).events()
        per_export[export] = (
            collections.Counter(events["name"].map(_strip_group_hash)),
            events.groupby("rank_id")["op_type"].value_counts().to_dict(),
        )
    assert per_export["db"][0] == per_export["text"][0]
    assert per_export["db"][1] == per_export["text"][1]


def test_communication_rows_are_communication_under_both_core_names(tmp_path):
    from npuprof.pipeline.runner import analyze

    analyze(QWEN_TRAINING, tmp_path / "new", jobs=1)  # core COMMUNICATION (CANN 8.3)
    analyze(PYTORCH_DATA / "text" / "level2", tmp_path / "old", jobs=1)  # core HCCL
    for out in ("new", "old"):
        events = Analysis(tmp_path / out).events()
        hcom = events[events["name"].str.startswith("hcom_")]
        assert len(hcom) and (hcom["op_type"] == "communication").all()
        assert hcom["categories"].map(lambda c: any(x.startswith("communication") for x in c)).all()


def test_level0_pipeline_fields_are_null_not_zero(tmp_path):
    from npuprof.pipeline.runner import analyze

    analyze(PYTORCH_DATA / "text" / "level0", tmp_path / "o", jobs=1)
    events = Analysis(tmp_path / "o").events()
    for field in schema.PIPELINE_FIELDS:
        assert events[field].isna().all(), field
    manifest = Analysis(tmp_path / "o").manifest("normalize")
    assert manifest["pipeline_coverage"] is None or manifest["pipeline_coverage"] == 0


def test_row_idx_is_the_evidence_anchor_back_to_the_source_row(tmp_path):
    from npuprof.pipeline.runner import analyze

    analyze(QWEN_TRAINING, tmp_path / "o", jobs=1)
    events = Analysis(tmp_path / "o").events(rank_id=2)
    source = QWEN_TRAINING / "rank_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with open(source, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    sample = events.sample(50, random_state=1)
    for row_idx, name, start_ns in zip(sample["row_idx"], sample["name"], sample["start_ns"]):
        raw = rows[row_idx]
        assert raw["Name"] == name
        assert raw["Start Time(us)"].strip() == f"{start_ns // 1000}.{start_ns % 1000:03d}"


def test_capture_info_records_level_metrics_versions_and_parallel_groups(tmp_path):
    from npuprof.pipeline.runner import analyze

    analyze(QWEN_TRAINING, tmp_path / "o", jobs=1)
    info = Analysis(tmp_path / "o").capture_info()
    assert info["common"]["profiler_level"] == "Level2"
    assert info["common"]["aic_metrics"] == "ACL_AICORE_PIPE_UTILIZATION"
    assert info["common"]["distributed_args"]["pipeline_model_parallel_size"] == 2
    rank0 = info["ranks"][0]
    assert rank0["parallel_group_info"]["group_name_19"]["group_name"] == "pp"


def test_ranks_without_kernel_data_are_empty_partitions_with_a_note(tmp_path):
    from npuprof.pipeline.runner import analyze

    result = analyze(QWEN_TRAINING, tmp_path / "o", jobs=1)
    assert any("rank 1" in n and "no device events" in n for n in result["notes"])
    assert len(Analysis(tmp_path / "o").events(rank_id=1)) == 0


def test_parallel_map_writes_the_same_tables_as_one_process(tmp_path):
    from npuprof.pipeline.runner import analyze

    analyze(QWEN_TRAINING, tmp_path / "one", jobs=1)
    analyze(QWEN_TRAINING, tmp_path / "two", jobs=2)
    one = Analysis(tmp_path / "one").events().sort_values(["rank_id", "row_idx"]).reset_index(drop=True)
    two = Analysis(tmp_path / "two").events().sort_values(["rank_id", "row_idx"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(one, two)


def test_source_auto_prefers_db_and_csv_forces_csv(tmp_path, cli):
    from npuprof.pipeline.runner import analyze

    analyze(PYTORCH_DATA / "db" / "level1", tmp_path / "auto", jobs=1)
    manifest = Analysis(tmp_path / "auto").manifest("normalize")
    assert {r["source_kind"] for r in manifest["rank_summaries"]} == {"profiler_db"}
    assert all("schema probe" in r["source_choice"] for r in manifest["rank_summaries"])
    run = cli(
        "analyze",
        str(PYTORCH_DATA / "db" / "level1"),
        "-o",
        str(tmp_path / "csv"),
        "--source",
        "csv",
        "--progress",
        "none",
    )
    assert run.returncode == 3 and "--source csv" in run.result["error"]


def test_process_pool_map_matches_in_process_and_carries_errors_across_processes(tmp_path):
    """Rank chains map in a process pool or in this process: the same rank units, and typed errors
    survive pickling."""
    from conftest import copy_sample

    from npuprof.pipeline.errors import StageFailed
    from npuprof.pipeline.execution import map_rank_chains
    from npuprof.pipeline.options import AnalyzeOptions
    from npuprof.pipeline.progress import no_progress
    from npuprof.pipeline.sources.discovery import discover

    inputs = discover(QWEN_TRAINING)
    normalize = ["normalize"]
    chains = map_rank_chains(tmp_path / "p", inputs, AnalyzeOptions(), normalize, 2, no_progress, in_pool=True)
    assert sorted(c["normalize"]["event_count"] for c in chains) == [0, 0, 2463, 2587]
    by_process = (
        pd.read_parquet(tmp_path / "p" / schema.NORMALIZED_EVENTS)
        .sort_values(["rank_id", "row_idx"])
        .reset_index(drop=True)
    )
    map_rank_chains(tmp_path / "t", inputs, AnalyzeOptions(), normalize, 2, no_progress, in_pool=False)
    in_process = (
        pd.read_parquet(tmp_path / "t" / schema.NORMALIZED_EVENTS)
        .sort_values(["rank_id", "row_idx"])
        .reset_index(drop=True)
    )
    pd.testing.assert_frame_equal(by_process, in_process)

    broken = copy_sample(QWEN_TRAINING, tmp_path / "broken")
    (broken / "rank_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_bytes(b"")
    with pytest.raises(StageFailed) as raised:
        map_rank_chains(tmp_path / "b", discover(broken), AnalyzeOptions(), normalize, 2, no_progress, in_pool=True)
    assert raised.value.phase == "normalize (rank 2)" and raised.value.exit_code == 3
    assert "empty file" in raised.value.one_line()


def test_a_pooled_map_runs_the_smallest_ranks_here_and_the_biggest_in_the_pool(tmp_path):
    """With 2 jobs the pool holds one process: it takes the biggest rank first, this process the
    smallest (its chain reports stage by stage, as an in-process run's); a failure on the pool's side
    still names its rank."""
    from conftest import copy_sample

    from npuprof.pipeline.errors import StageFailed
    from npuprof.pipeline.execution import map_rank_chains
    from npuprof.pipeline.memory import rank_input_bytes
    from npuprof.pipeline.options import AnalyzeOptions
    from npuprof.pipeline.progress import no_progress
    from npuprof.pipeline.sources.discovery import discover

    inputs = discover(QWEN_TRAINING)
    by_size = sorted(inputs.ranks, key=rank_input_bytes)
    heard = []
    chains = map_rank_chains(
        tmp_path / "p", inputs, AnalyzeOptions(), ["normalize"], 2, lambda *said: heard.append(said), in_pool=True
    )
    assert sorted(c["normalize"]["rank_id"] for c in chains) == sorted(r.rank_id for r in inputs.ranks)
    here = {message for stage_name, _, _, message in heard if stage_name == "normalize"}
    assert f"rank {by_size[0].rank_id}" in here and f"rank {by_size[-1].rank_id}" not in here
    assert [done for stage_name, done, _, _ in heard if stage_name == "ranks"] == [0, 1, 2, 3, 4]

    broken = copy_sample(QWEN_TRAINING, tmp_path / "broken")
    biggest = Path(by_size[-1].kernel_csv.replace(str(QWEN_TRAINING), str(broken)))
    biggest.write_bytes(biggest.read_bytes()[:300] + b"\xff\xfe broken")
    with pytest.raises(StageFailed) as raised:
        map_rank_chains(tmp_path / "b", discover(broken), AnalyzeOptions(), ["normalize"], 2, no_progress, in_pool=True)
    assert raised.value.phase == f"normalize (rank {by_size[-1].rank_id})" and raised.value.exit_code == 3


def test_events_are_stored_in_device_order_whatever_the_source_order(tmp_path):
    """Later stages index positions into the device order; normalize stores it, so a capture whose
    rows are shuffled gives the same steps, and its row anchors still point at the right rows."""
    import random

    from npuprof.pipeline.runner import StageRange, analyze
    from npuprof.synth import generate

    root = generate(tmp_path / "root", "clean", seed=4, ranks=2, steps=3)["root"]
    analyze(root, tmp_path / "ordered", jobs=1, stage_range=StageRange(to_stage="segment"))
    for source in sorted(tmp_path.joinpath("root").rglob("kernel_details.csv")):
        header, *rows = source.read_text(encoding="utf-8").splitlines(keepends=True)
        random.Random(7).shuffle(rows)
        source.write_text(header + "".join(rows), encoding="utf-8")
    analyze(root, tmp_path / "shuffled", jobs=1, stage_range=StageRange(to_stage="segment"))
    paths = {
        s["source_id"]: s["path"]
        for s in json.loads((tmp_path / "shuffled" / schema.SOURCE_INDEX).read_text())["sources"]
    }
    for rank_id, events in Analysis(tmp_path / "shuffled").events().groupby("rank_id"):
        order = events[["start_ns", "row_idx"]].to_records(index=False).tolist()
        assert order == sorted(order), rank_id  # stored by start time, then source row
        with open(paths[events["source_id"].iloc[0]], newline="", encoding="utf-8") as handle:
            raw = list(csv.DictReader(handle))
        assert all(raw[r]["Name"] == name for r, name in zip(events["row_idx"], events["name"]))
    steps = [pd.read_parquet(tmp_path / out / schema.STEP_SEGMENTS) for out in ("ordered", "shuffled")]
    pd.testing.assert_frame_equal(*(s[["rank_id", "step_id", "start_ns", "end_ns"]] for s in steps))
