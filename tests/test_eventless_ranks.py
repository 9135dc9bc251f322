"""Ranks without device events (communication files only) take a short path through the rank stages
and write only the partitions that hold rows; everything downstream reads them as before.

The real Qwen3 capture has two such ranks (1 and 3: communication.json, communication_matrix.json,
step_trace_time.csv, no kernels). Each stage's ``map_eventless`` must give what its ``map_rank`` gives
on them — the same manifest, the same rows — also when their files are broken.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import SAMPLE_ROOTS, copy_sample

from npuprof.api.analysis import Analysis
from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.pipeline.sources.discovery import discover
from npuprof.pipeline.sources.step_trace import read_step_trace_time
from npuprof.pipeline.stages import STAGES
from npuprof.pipeline.stages.base import RankContext

# one worker runs the module: its module fixture is built once (xdist would build it again on each
# worker a test of it lands on, and again whenever modules interleave there)
pytestmark = pytest.mark.xdist_group("eventless_ranks")

EVENTLESS = (1, 3)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Path:
    return copy_sample(SAMPLE_ROOTS["qwen3_training"][0], tmp_path_factory.mktemp("eventless") / "root")


def _rank_output(root: Path, rank_id: int) -> Path:
    return next(root.glob(f"*rank_{rank_id}_*")) / "ASCEND_PROFILER_OUTPUT"


def _both_paths_agree(root: Path, out: Path) -> int:
    """Run every stage's map_rank and map_eventless on each eventless rank of the analyzed ``out``
    and assert they agree; the number of (rank, stage) pairs compared."""
    ranks = {r.rank_id: r for r in discover(root).ranks}
    compared = 0
    for rank_id in EVENTLESS:
        assert not ranks[rank_id].has_kernel_source()
        for stage in [s for s in STAGES if s.map_eventless is not None]:
            short = stage.map_eventless(RankContext(out, ranks[rank_id], AnalyzeOptions()))
            full = stage.map_rank(RankContext(out, ranks[rank_id], AnalyzeOptions()))
            assert short.manifest == full.manifest, (rank_id, stage.name)
            for table in full.tables:
                expected = table.conform(full.tables[table])
                found = table.conform(short.tables.get(table, table.schema.empty_table()))
                assert found.equals(expected), (rank_id, stage.name, table.name)
            assert set(short.tables) <= set(full.tables), (rank_id, stage.name)
            compared += 1
    return compared


def test_the_short_path_gives_what_map_rank_gives(qwen3, tmp_path):
    out = tmp_path / "out"
    analyze(qwen3, out, jobs=1, stage_range=StageRange(to_stage="model"))
    assert _both_paths_agree(qwen3, out) == 2 * 5  # segment, classify, summarize, evidence, model


def test_the_short_path_notes_broken_files_as_map_rank_does(qwen3, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(qwen3, root)
    one, three = _rank_output(root, 1), _rank_output(root, 3)
    (one / "communication.json").write_text('{"step13": {"collective": {', "utf-8")  # truncated
    (one / "step_trace_time.csv").write_bytes(b"\x00\xff" * 64)
    (three / "communication_matrix.json").write_text("[1, 2]", "utf-8")
    out = tmp_path / "out"
    analyze(root, out, jobs=1, stage_range=StageRange(to_stage="model"))
    assert _both_paths_agree(root, out) == 10
    segment = io.read_json(out / schema.stage_manifest_name("segment"))
    assert [(n["rank_id"], n["file"]) for n in segment["unreadable_inputs"]] == [(1, "step_trace_time.csv")]


def test_an_eventless_rank_writes_only_rows_and_every_table_reads_whole(qwen3, tmp_path):
    out = tmp_path / "out"
    analyze(qwen3, out, jobs=1)
    rank_tables = [t for s in STAGES for t in s.rank_tables() if t in s.produces]
    # a table written under some captures only (an inference capture's forwards) is not written for training
    assert not [t.name for s in STAGES for t in s.rank_tables() if t not in s.produces and (out / t.path).exists()]
    written = {t.name for t in rank_tables if (out / t.partition(1)).exists()}
    assert written == {schema.COMMUNICATION_OPS.name, schema.COMMUNICATION_LINKS.name}
    for table in rank_tables:
        assert (out / table.path).is_dir(), table.name  # the table exists once its stage ran
        assert (out / table.partition(0)).exists(), table.name  # a rank with events writes every one
        assert io.read_dataset(out, table, 1).schema.names == list(table.columns)
    ops = io.read_dataset(out, schema.COMMUNICATION_OPS).to_pandas()
    assert set(ops["rank_id"]) == {0, 1, 2, 3} and (ops["rank_id"] == 1).sum() > 0
    analysis = Analysis(out)
    assert analysis.events(1).empty and list(analysis.events(1).columns)[0] == "rank_id"
    assert len(analysis.events(0)) > 0
    with pytest.raises(KeyError, match="no rank 5 in"):
        analysis.events(5)  # not a rank of this root: an error, not an empty frame


def test_a_root_with_eventless_ranks_resumes_from_a_later_stage(qwen3, tmp_path):
    out = tmp_path / "out"
    first = analyze(qwen3, out, jobs=2)
    again = analyze(qwen3, out, jobs=1, stage_range=StageRange(from_stage="summarize"))
    assert first["status"] == again["status"] == "ok"
    summary = io.read_json(out / "report" / "analysis_summary.json")
    assert summary["identity"]["ranks_with_events"] == 2
    traced = [g["ranks"] for g in summary["headline"]["groups"] if g["source"] == "step_trace_time.csv"]
    assert sorted(r for ranks in traced for r in ranks) == list(EVENTLESS)


def test_a_missing_partition_reads_as_the_declared_empty_table(tmp_path):
    table = schema.COMMUNICATION_OPS
    assert io.read_dataset(tmp_path, table, 7).equals(table.schema.empty_table())
    (tmp_path / table.path).mkdir()
    whole = io.read_dataset(tmp_path, table, columns=["op_name", "rank_id"], dictionary=("op_name",))
    assert whole.num_rows == 0
    assert whole.schema.field("op_name").type == pa.dictionary(pa.int32(), pa.string())
    assert whole.schema.field("rank_id").type == pa.int32()
    filtered = io.read_dataset(tmp_path, table, columns=["op_name", "rank_id"], filter=pc.field("rank_id") == 2)
    assert filtered.num_rows == 0 and filtered.schema.names == ["op_name", "rank_id"]
    io.write_parquet(tmp_path / table.partition(2), table.schema.empty_table())
    written = io.read_dataset(tmp_path, table, columns=["op_name", "rank_id"], dictionary=("op_name",))
    assert written.schema.equals(whole.schema)


def test_a_step_trace_row_wider_than_its_header_is_named(tmp_path):
    path = tmp_path / "step_trace_time.csv"
    header = "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage"
    path.write_text(f"{header}\n0,1,5,2,0,2,3,10\n\n0,2,5,2,0,2,3,10,99\n", "utf-8")
    with pytest.raises(BadInput) as raised:
        read_step_trace_time(path)
    assert raised.value.line == 4 and "9 fields, the header has 8" in raised.value.reason
    path.write_text(f"\ufeff{header}\n 0 ,1, 5.5 ,2,0,2,3,1e1\n", "utf-8")
    read = read_step_trace_time(path)
    assert read["step_id"].tolist() == [1] and read["wall_ms"].tolist() == [0.01]
    assert read["compute_ms"].tolist() == [0.0055] and read["preparing_ms"].isna().all()


def test_a_step_split_without_profiler_steps_holds_no_step_and_a_partly_blank_one_is_named(tmp_path):
    """A serving capture (no ProfilerStep) exports one whole-capture row per device with an empty Step:
    no step to split, not an unreadable file; a blank Step among numbered ones is still a broken file."""
    path = tmp_path / "step_trace_time.csv"
    header = "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Preparing"
    path.write_text(f"{header}\n0,,5011.2,120.4,0,120.4,900.1,6031.7,0\n", "utf-8")
    read = read_step_trace_time(path)
    assert read.empty and list(read.columns)[:2] == ["step_id", "wall_ms"]
    path.write_text(f"{header}\n0,1,5,2,0,2,3,10,0\n0,,5,2,0,2,3,10,0\n", "utf-8")
    with pytest.raises(BadInput, match="Step: not a number: ''"):
        read_step_trace_time(path)


def test_many_ranks_map_in_the_pool_whatever_their_bytes(tmp_path):
    from npuprof.pipeline.execution import POOL_MIN_RANKS, _uses_process_pool
    from npuprof.pipeline.sources.discovery import RankInput, RootInputs

    def root(count: int) -> RootInputs:
        ranks = [RankInput(rank_id=r, rank_dir=str(tmp_path), rank_id_from="dir") for r in range(count)]
        return RootInputs(requested_path=str(tmp_path), root=str(tmp_path), ranks=ranks)

    assert _uses_process_pool(root(POOL_MIN_RANKS), jobs=2)  # ~10 ms of chain each, even without bytes
    assert not _uses_process_pool(root(POOL_MIN_RANKS - 1), jobs=2)  # a few small ranks: no pool start-up
    assert not _uses_process_pool(root(POOL_MIN_RANKS), jobs=1)  # a sweep's root (jobs 1): never nested
