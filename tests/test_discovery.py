"""Discovery: which dirs are ranks, which rank ids they get, and which inputs are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import PYTORCH_DATA, QWEN_TRAINING, SERVER_DATA, copy_sample

from npuprof.pipeline.errors import BadInput, ManifestNotOk
from npuprof.pipeline.sources.discovery import discover

KERNEL_CSV = PYTORCH_DATA / "text" / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"


def make_rank(
    parent: Path, dirname: str, *, info_name: str | None = None, info: dict | None = None, metadata: dict | None = None
) -> Path:
    rank_dir = parent / dirname
    (rank_dir / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    shutil.copy(KERNEL_CSV, rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    if info_name:
        (rank_dir / info_name).write_text(json.dumps(info or {}))
    if metadata is not None:
        (rank_dir / "profiler_metadata.json").write_text(json.dumps(metadata))
    return rank_dir


def test_cluster_root_finds_every_rank_with_id_from_profiler_info_file_name():
    inputs = discover(QWEN_TRAINING)
    assert [r.rank_id for r in inputs.ranks] == [0, 1, 2, 3]
    assert {r.rank_id_from for r in inputs.ranks} == {"profiler_info_filename"}
    assert [r.has_kernel_source() for r in inputs.ranks] == [True, False, True, False]


def test_one_rank_dir_and_its_profiler_output_dir_are_both_accepted():
    rank_dir = QWEN_TRAINING / "rank_2_ascend_pt"
    for path in (rank_dir, rank_dir / "ASCEND_PROFILER_OUTPUT"):
        inputs = discover(path)
        assert [r.rank_id for r in inputs.ranks] == [2]
        assert inputs.ranks[0].kernel_csv.endswith("kernel_details.csv")


def test_rank_id_from_profiler_info_content_when_the_file_has_no_number(tmp_path):
    make_rank(tmp_path, "worker_a", info_name="profiler_info.json", info={"rank_id": "5"})
    inputs = discover(tmp_path)
    assert [(r.rank_id, r.rank_id_from) for r in inputs.ranks] == [(5, "profiler_info_rank_id")]


@pytest.mark.parametrize(
    "dirname, expected",
    [("rank_3", 3), ("rank7", 7), ("host_12345_20250101_rank11", 11), ("node-rank-4_ascend_pt", 4)],
)
def test_rank_id_from_dir_name_patterns(tmp_path, dirname, expected):
    make_rank(tmp_path, dirname)
    inputs = discover(tmp_path)
    assert [(r.rank_id, r.rank_id_from) for r in inputs.ranks] == [(expected, "dir_name")]


def test_rank_id_from_dp_pp_tp_dir_name_uses_parallel_sizes_from_metadata(tmp_path):
    sizes = {
        "distributed_args": {
            "tensor_model_parallel_size": 2,
            "data_parallel_size": 2,
            "pipeline_model_parallel_size": 2,
        }
    }
    make_rank(tmp_path, "dp1_pp1_tp0", metadata=sizes)
    inputs = discover(tmp_path)
    # Megatron order: tp fastest, then dp, then pp → 1*4 + 1*2 + 0
    assert [(r.rank_id, r.rank_id_from) for r in inputs.ranks] == [(6, "dir_name")]


def test_rank_id_falls_back_to_ordinal(tmp_path):
    make_rank(tmp_path, "alpha")
    make_rank(tmp_path, "beta")
    inputs = discover(tmp_path)
    assert [(r.rank_id, r.rank_id_from, Path(r.rank_dir).name) for r in inputs.ranks] == [
        (0, "ordinal", "alpha"),
        (1, "ordinal", "beta"),
    ]


def test_two_dirs_with_one_rank_id_is_an_error_naming_both(tmp_path):
    first = make_rank(tmp_path, "a_ascend_pt", info_name="profiler_info_0.json")
    second = make_rank(tmp_path, "b_ascend_pt", info_name="profiler_info_0.json")
    with pytest.raises(BadInput) as raised:
        discover(tmp_path)
    message = raised.value.one_line()
    assert str(first) in message and str(second) in message and "rank 0" in message


def test_backup_and_output_dirs_are_ignored(tmp_path):
    make_rank(tmp_path, "rank_0")
    make_rank(tmp_path, "rank_1.bak")
    out = tmp_path / "previous_analysis"
    (out / "normalized_events").mkdir(parents=True)
    (out / "ASCEND_PROFILER_OUTPUT").mkdir()
    inputs = discover(tmp_path)
    assert [Path(r.rank_dir).name for r in inputs.ranks] == ["rank_0"]


def test_collection_manifest_ok_resolves_profile_root(tmp_path):
    root = copy_sample(PYTORCH_DATA / "text" / "level2", tmp_path / "capture")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"analysis_status": "ok", "profile_root": "capture"}))
    inputs = discover(manifest)
    assert inputs.root == str(root) and inputs.collection_manifest == str(manifest)
    assert [r.rank_id for r in inputs.ranks] == [0, 1]


def test_collection_manifest_falls_back_to_remote_profile_root(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {"analysis_status": "ok", "profile_root": "/nonexistent/x", "remote_profile_root": str(QWEN_TRAINING)}
        )
    )
    assert discover(manifest).root == str(QWEN_TRAINING)


def test_collection_manifest_not_ok_is_refused_with_its_status(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"analysis_status": "collection_failed", "profile_root": str(QWEN_TRAINING)}))
    with pytest.raises(ManifestNotOk) as raised:
        discover(manifest)
    assert "collection_failed" in raised.value.one_line()


def test_a_dir_without_profiling_data_is_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput) as raised:
        discover(tmp_path / "empty")
    assert "no profiling data" in raised.value.one_line()


def test_ranks_with_only_communication_files_are_kept_but_not_alone(tmp_path):
    only_comm = copy_sample(QWEN_TRAINING / "rank_1_ascend_pt", tmp_path / "rank_1_ascend_pt")
    with pytest.raises(BadInput) as raised:
        discover(only_comm)
    assert "none of the 1 rank dirs holds kernel data" in raised.value.one_line()


def test_direct_kernel_files_make_a_rank_dir():
    assert [r.op_summary_csvs != [] for r in discover(SERVER_DATA / "test_kernel_parse").ranks] == [True]
    assert [len(r.profiler_dbs) for r in discover(SERVER_DATA / "full_db").ranks] == [1]
