"""The root stages' kept reads (pipeline/read_cache.py): served again only while the files are the same."""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline import io, read_cache, schema

TABLE = schema.COMMUNICATION_LINKS


def _write(out, rank: int, bandwidth: float) -> None:
    rows = {name: pa.nulls(1, field.type) for name, field in zip(TABLE.schema.names, TABLE.schema)}
    rows["bandwidth_gbps"] = pa.array([bandwidth])
    io.write_parquet(out / TABLE.partition(rank), pa.table(rows).cast(TABLE.schema))


def test_a_whole_read_is_kept_within_the_block_and_serves_fewer_columns(tmp_path):
    for rank in range(3):
        _write(tmp_path, rank, 10.0 + rank)
    with read_cache.cached_reads():
        first = io.read_dataset(tmp_path, TABLE)
        assert io.read_dataset(tmp_path, TABLE) is first
        fewer = io.read_dataset(tmp_path, TABLE, columns=["bandwidth_gbps", "rank_id"])
        fresh = io._read_partitions(io._partition_files(tmp_path / TABLE.path), ["bandwidth_gbps"], ())
        assert fewer.equals(fresh) and fewer.column_names == ["bandwidth_gbps", "rank_id"]
    assert io.read_dataset(tmp_path, TABLE) is not io.read_dataset(tmp_path, TABLE)  # outside: no keeping


def test_a_rewritten_or_added_partition_is_read_again(tmp_path):
    for rank in range(2):
        _write(tmp_path, rank, 10.0)
    with read_cache.cached_reads():
        before = io.read_dataset(tmp_path, TABLE, columns=["bandwidth_gbps"])
        _write(tmp_path, 1, 99.0)
        assert io.read_dataset(tmp_path, TABLE, columns=["bandwidth_gbps"]).column(0).to_pylist() == [10.0, 99.0]
        _write(tmp_path, 2, 7.0)
        assert io.read_dataset(tmp_path, TABLE, columns=["bandwidth_gbps"]).column(0).to_pylist() == [10.0, 99.0, 7.0]
        assert before.column(0).to_pylist() == [10.0, 10.0]


def test_a_table_over_the_limit_is_not_kept(tmp_path, monkeypatch):
    _write(tmp_path, 0, 1.0)
    monkeypatch.setattr(read_cache, "TABLE_BYTES", 1)
    with read_cache.cached_reads():
        assert io.read_dataset(tmp_path, TABLE) is not io.read_dataset(tmp_path, TABLE)
