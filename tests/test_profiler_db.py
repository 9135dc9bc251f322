"""Profiler sqlite exports: schema 1.0.0 (samples), 1.2.0 (newer CANN), msprof dbs; never written to."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from conftest import PYTORCH_DATA, SAMPLES, SERVER_DATA

from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.sources.profiler_db import connect_readonly, probe, read_profiler_db

PROFILER_DBS = sorted(p for p in SAMPLES.rglob("*.db") if p.name != "analysis.db")


def independent_counts(path: Path) -> tuple[int, int]:
    """compute rows (COMPUTE_TASK_INFO ⋈ TASK) and communication rows, counted straight in sqlite."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    compute = con.execute(
        "SELECT COUNT(*) FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId"
    ).fetchone()[0]
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    comm = con.execute("SELECT COUNT(*) FROM COMMUNICATION_OP").fetchone()[0] if "COMMUNICATION_OP" in tables else 0
    con.close()
    return compute, comm


@pytest.mark.parametrize("path", PROFILER_DBS, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_every_sample_db_reads_its_compute_and_communication_rows(path):
    table, facts = read_profiler_db(path)
    compute, comm = independent_counts(path)
    assert table.num_rows == compute + comm
    assert facts["communication_rows"] == comm
    starts = table.column("start_ns").to_pylist()
    assert starts == sorted(starts)


def test_sample_dbs_are_schema_1_0_0_and_probe_clean():
    for path in PROFILER_DBS:
        checked = probe(path)
        assert checked.ok, (path, checked.reason)
        if path.name.startswith("ascend_pytorch_profiler"):
            assert checked.schema_version == "1.0.0"


def _digest_tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_reading_the_samples_changes_no_file_and_creates_no_wal_or_shm(cli, tmp_path):
    before = _digest_tree(SAMPLES)
    for path in PROFILER_DBS:
        read_profiler_db(path)
    run = cli("analyze", str(PYTORCH_DATA / "db" / "level1"), "-o", str(tmp_path / "out"), "--progress", "none")
    assert run.returncode == 0, run.stderr
    assert _digest_tree(SAMPLES) == before
    assert not [p for p in SAMPLES.rglob("*") if p.name.endswith(("-wal", "-shm", "-journal"))]


def test_pmu_metrics_pivot_into_pipeline_columns_in_microseconds():
    path = (
        PYTORCH_DATA / "db" / "level2" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    )
    table, _ = read_profiler_db(path)
    con = connect_readonly(path)
    ids = dict(
        con.execute("SELECT value, id FROM STRING_IDS WHERE value IN ('aiv_total_time', 'aiv_mte2_time')").fetchall()
    )
    first_key = table.column("source_row_key")[0].as_py()
    aiv_ns = con.execute(
        "SELECT value FROM TASK_PMU_INFO WHERE globalTaskId = ? AND name = ?", (first_key, ids["aiv_total_time"])
    ).fetchone()[0]
    con.close()
    assert table.column("aiv_time_us")[0].as_py() == pytest.approx(aiv_ns / 1000)
    comm = [i for i, n in enumerate(table.column("name").to_pylist()) if n.startswith("hcom_")]
    assert all(table.column("aicore_time_us")[i].as_py() is None for i in comm)


def test_level0_db_without_pmu_has_null_pipeline_not_zero():
    path = (
        PYTORCH_DATA / "db" / "level0" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    )
    table, facts = read_profiler_db(path)
    assert "aicore_time_us" not in table.column_names  # normalize fills it with nulls
    assert any("TASK_PMU_INFO" in n for n in facts["notes"])


def test_step_ids_come_from_step_time():
    path = (
        PYTORCH_DATA / "db" / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    )
    table, _ = read_profiler_db(path)
    assert set(table.column("step_id").to_pylist()) == {50}


def make_schema_1_2_0_db(path: Path) -> None:
    """A small db in the newer 1.2.0 layout: blockNum/mixBlockNum/opState/hf32Eligible, PMU keyed by rowid."""
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE META_DATA (name TEXT, value TEXT);
        INSERT INTO META_DATA VALUES ('SCHEMA_VERSION', '1.2.0');
        CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
        INSERT INTO STRING_IDS VALUES (1, 'aclnnMatmul_MatMulV3_MatMulV3'), (2, 'AI_CORE'), (3, 'MatMulV3'),
            (4, 'ND;ND'), (5, 'DT_BF16;DT_BF16'), (6, '"4096,512;512,1024"'), (7, 'dynamic'), (8, 'NO'),
            (9, 'hcom_allReduce__123_0_1'), (10, 'hcom_allReduce_'), (11, 'aic_total_time'), (12, 'aic_mac_time'),
            (13, 'FlashAttentionScore'), (14, 'MIX_AIC');
        CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, globalTaskId INTEGER,
            globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER, taskId INTEGER, modelId INTEGER);
        INSERT INTO TASK VALUES
            (1000000000000000100, 1000000000000005100, 3, 1, 500, 0, 2, 4294967295, 7, 41, 4294967295),
            (1000000000000006000, 1000000000000016000, 3, 2, 501, 0, 14, 4294967295, 7, 42, 4294967295);
        CREATE TABLE COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER, blockNum INTEGER, mixBlockNum INTEGER,
            taskType INTEGER, opType INTEGER, inputFormats INTEGER, inputDataTypes INTEGER, inputShapes INTEGER,
            outputFormats INTEGER, outputDataTypes INTEGER, outputShapes INTEGER, opState INTEGER,
            hf32Eligible INTEGER);
        INSERT INTO COMPUTE_TASK_INFO VALUES
            (1, 500, 20, 0, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8), (13, 501, 24, 48, 14, 13, 4, 5, 6, 4, 5, 6, 7, 8);
        CREATE TABLE TASK_PMU_INFO (globalTaskId INTEGER, name INTEGER, value NUMERIC);
        INSERT INTO TASK_PMU_INFO VALUES (1, 11, 4500), (1, 12, 3000), (2, 11, 9000);
        CREATE TABLE COMMUNICATION_OP (opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER,
            groupName INTEGER, opId INTEGER PRIMARY KEY, relay INTEGER, retry INTEGER, dataType INTEGER,
            algType INTEGER,
            count NUMERIC, opType INTEGER, deviceId INTEGER);
        INSERT INTO COMMUNICATION_OP VALUES
            (9, 1000000000000005500, 1000000000000005900, 3, 0, 77, 0, 0, 4, 0, 1024, 10, 3);
        """
    )
    con.commit()
    con.close()


def test_schema_1_2_0_columns_map_onto_the_same_fields(tmp_path):
    path = tmp_path / "ascend_pytorch_profiler_3.db"
    make_schema_1_2_0_db(path)
    checked = probe(path)
    assert checked.ok and checked.schema_version == "1.2.0"
    table, _ = read_profiler_db(path)
    rows = table.to_pylist()
    assert [r["name"] for r in rows] == [
        "aclnnMatmul_MatMulV3_MatMulV3",
        "hcom_allReduce__123_0_1",
        "FlashAttentionScore",
    ]
    matmul, hccl, fa = rows
    assert matmul["block_dim"] == 20 and matmul["op_state"] == "dynamic" and matmul["hf32_eligible"] == "NO"
    assert matmul["input_shapes"] == "4096,512;512,1024"
    assert matmul["aicore_time_us"] == pytest.approx(4.5) and matmul["aic_mac_time_us"] == pytest.approx(3.0)
    assert fa["mix_block_dim"] == 48 and fa["aicore_time_us"] == pytest.approx(9.0)
    assert matmul["context_id"] is None and matmul["device_id"] == 3
    assert hccl["accelerator_core"] == "COMMUNICATION" and hccl["type"] == "hcom_allReduce_" and hccl["device_id"] == 3
    assert hccl["wait_ns"] == 400  # gap after the matmul ended (no waitNs column in this schema)


def test_a_db_of_another_schema_fails_the_probe(tmp_path):
    path = tmp_path / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE KERNELS (name TEXT, start INTEGER)")
    con.commit()
    con.close()
    checked = probe(path)
    assert not checked.ok
    assert "missing" in checked.reason and "not a profiler db" in checked.reason
    with pytest.raises(BadInput) as raised:
        read_profiler_db(path)
    assert str(path) in raised.value.one_line()


def test_a_file_that_is_not_sqlite_fails_the_probe(tmp_path):
    path = tmp_path / "ascend_pytorch_profiler_0.db"
    path.write_bytes(b"this is not a database" * 100)
    checked = probe(path)
    assert not checked.ok and "sqlite" in checked.reason


def test_msprof_db_without_meta_data_is_probed_by_columns():
    checked = probe(SERVER_DATA / "full_db" / "msprof_0.db")
    assert checked.ok and checked.schema_version is None


def test_a_hot_journal_is_rolled_back_in_a_private_copy_and_nothing_is_written_beside_the_db(tmp_path):
    from badinputs.corpus import DB0, DB_ROOT, hot_journal_db

    original, _ = read_profiler_db(DB_ROOT / DB0)
    root = hot_journal_db(tmp_path)
    before = sorted(p.name for p in (root / DB0).parent.iterdir())
    first_start = "SELECT min(startNs) FROM TASK"
    with sqlite3.connect(f"file:{root / DB0}?mode=ro&immutable=1", uri=True) as con:
        torn = con.execute(first_start).fetchone()[0]
    with sqlite3.connect(f"file:{DB_ROOT / DB0}?mode=ro&immutable=1", uri=True) as con:
        assert torn == con.execute(first_start).fetchone()[0] + 7  # the db file holds the uncommitted write
    recovered, facts = read_profiler_db(root / DB0)
    assert recovered.column("start_ns").equals(original.column("start_ns"))  # rolled back, as sqlite would
    assert any("-journal" in note for note in facts["notes"])
    assert sorted(p.name for p in (root / DB0).parent.iterdir()) == before


def test_rows_committed_only_to_the_wal_are_read(tmp_path):
    from badinputs.corpus import DB0, DB_ROOT, wal_db

    original, _ = read_profiler_db(DB_ROOT / DB0)
    root = wal_db(tmp_path)
    with sqlite3.connect(f"file:{root / DB0}?mode=ro&immutable=1", uri=True) as con:
        in_db_file = con.execute("SELECT count(*) FROM TASK").fetchone()[0]
    with sqlite3.connect(f"file:{DB_ROOT / DB0}?mode=ro&immutable=1", uri=True) as con:
        assert in_db_file == con.execute("SELECT count(*) FROM TASK").fetchone()[0]  # the new row is only in -wal
    events, facts = read_profiler_db(root / DB0)
    assert events.num_rows == original.num_rows + 1
    assert any("-wal" in note for note in facts["notes"])
