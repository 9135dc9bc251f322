"""kernel_details.csv and op_summary csv: every real header variant reads, exactly."""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow.compute as pc
import pytest
from conftest import MSTT, PYTORCH_DATA, QWEN_TRAINING, SAMPLES, SERVER_DATA

from npuprof.pipeline.sources.kernel_csv import read_kernel_csv

ALL_KERNEL_CSVS = sorted(SAMPLES.rglob("kernel_details.csv")) + sorted(SAMPLES.rglob("op_summary*.csv"))


def data_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle))
    return rows[1:]


@pytest.mark.parametrize("path", ALL_KERNEL_CSVS, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_every_sample_csv_reads_one_event_per_data_row(path):
    table, facts = read_kernel_csv(path)
    rows = data_rows(path)
    header_len = facts["header_columns"]
    well_formed = [i for i, r in enumerate(rows) if len(r) == header_len]
    assert table.num_rows + len(facts["quarantined_rows"]) == len(rows)
    assert table.num_rows == len(well_formed)
    # row_idx points at the data row each event came from, skipping quarantined rows.
    assert table.column("row_idx").to_pylist() == well_formed


def test_header_variants_cover_8_32_33_46_47_columns():
    widths = {read_kernel_csv(p)[1]["header_columns"] for p in ALL_KERNEL_CSVS}
    assert {8, 32, 33, 46, 47} <= widths


def test_start_time_with_trailing_tab_is_exact_integer_ns():
    path = QWEN_TRAINING / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    table, _ = read_kernel_csv(path)
    raw_first = data_rows(path)[0][9]
    assert raw_first == "1764246877073569.640\t"
    assert table.column("start_ns")[0].as_py() == 1764246877073569640
    assert table.column("duration_ns")[0].as_py() == 1892920


def test_every_start_time_round_trips_without_precision_loss():
    path = PYTORCH_DATA / "text" / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    table, _ = read_kernel_csv(path)
    raw = [r[8].strip() for r in data_rows(path)]
    formatted = [f"{ns // 1000}.{ns % 1000:03d}" for ns in table.column("start_ns").to_pylist()]
    assert formatted == raw


def test_quoted_excel_guarded_start_time_cells_read():
    path = MSTT / "ut" / "advisor" / "compute_advice" / "data" / "kernel_details.csv"
    table, _ = read_kernel_csv(path)
    assert table.column("start_ns")[0].as_py() == 1736413971558972912


def test_shapes_lose_their_literal_quotes():
    path = PYTORCH_DATA / "text" / "level2" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    table, _ = read_kernel_csv(path)
    assert table.column("input_shapes")[0].as_py() == "32,3,224,224"
    assert table.column("output_shapes")[0].as_py() == "32,1,224,224,8"


def test_na_cells_are_null_not_zero():
    path = PYTORCH_DATA / "text" / "level2" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    table, _ = read_kernel_csv(path)
    names = table.column("name").to_pylist()
    hccl = [i for i, n in enumerate(names) if n.startswith("hcom_")]
    assert hccl
    for i in hccl:
        assert table.column("aicore_time_us")[i].as_py() is None
        assert table.column("task_id")[i].as_py() is None


def test_level0_capture_has_no_pipeline_columns():
    path = PYTORCH_DATA / "text" / "level0" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    table, facts = read_kernel_csv(path)
    assert facts["header_columns"] == 8
    assert "aicore_time_us" not in table.column_names
    assert table.column("accelerator_core").null_count == 187  # N/A on every compute row


def test_invalid_uint32_model_id_becomes_null():
    path = QWEN_TRAINING / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    table, _ = read_kernel_csv(path)
    assert table.column("model_id").null_count == table.num_rows


def test_interior_malformed_row_is_quarantined_with_its_line():
    path = SERVER_DATA / "test_rank_0" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    table, facts = read_kernel_csv(path)
    assert facts["quarantined_rows"] == [{"line": 17, "fields": 31, "expected_fields": 32}]
    assert 15 not in table.column("row_idx").to_pylist()  # data row 15 sits on line 17


def test_block_num_and_bom_and_crlf_variant(tmp_path):
    src = PYTORCH_DATA / "text" / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    text = src.read_bytes().decode("utf-8")
    assert "\r\n" in text  # this sample is CRLF (read_text would translate it away)
    variant = "\ufeff" + text.replace("Block Dim", "Block Num", 1).replace("Step Id", "Step ID", 1)
    target = tmp_path / "kernel_details.csv"
    target.write_text(variant, encoding="utf-8", newline="")
    table, _ = read_kernel_csv(target)
    original, _ = read_kernel_csv(src)
    assert table.column("block_dim").equals(original.column("block_dim"))
    assert table.column("step_id").to_pylist() == original.column("step_id").to_pylist()
    assert pc.sum(table.column("block_dim")).as_py() > 0


def test_op_summary_column_names_map_like_kernel_details():
    op_summary, _ = read_kernel_csv(SERVER_DATA / "test_kernel_parse" / "op_summary_1.csv")
    kernel, _ = read_kernel_csv(SERVER_DATA / "test_rank_0" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    for column in ("name", "type", "accelerator_core", "start_ns", "duration_ns", "wait_ns"):
        assert op_summary.column(column).equals(kernel.column(column)), column


def test_seven_column_kernel_list_without_step_id_reads():
    table, facts = read_kernel_csv(MSTT / "resource" / "test.csv")
    assert facts["header_columns"] == 7 and table.num_rows == 8
    assert "step_id" not in table.column_names
    assert table.column("wait_ns")[1].as_py() == 199251950
