"""Benchmark: which engine for the per-rank stages — pandas (today), polars (lazy), Arrow compute or
DuckDB — on two computations every analysis runs per rank, each written once per engine and checked to
give the same answer:

- **operators**: summarize's operator table (``summaries/operators.operator_summary``'s aggregation):
  per (name, type, op_type) the first category, calls, summed time and wait, distinct streams, row and
  time range, and the summed pipeline times (null where a group has none);
- **idle gaps**: the device's idle windows of a rank (what evidence and the ledger build on): events
  by start, the running end of everything before, a gap where the next start is past it.

On a rank of ``--rows`` events (a synth rank's normalized events tiled in time) and on a small rank
(``--small-rows``: a small root's rank, where the fixed cost per operation is what counts). Each time is
the median of ``--repeats`` runs in this process, from the Arrow table a stage holds after its read to
the Arrow table the runner writes as Parquet: the pandas variant converts at both ends, as the stages
do today.
Needs polars, which npuprof does not depend on (``pip install polars``).
Usage: ``python bench/engines.py [--rows 250000] [--small-rows 1250] [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[1]

from npuprof.pipeline.schema import PIPELINE_FIELDS  # noqa: E402
from npuprof.synth import generate  # noqa: E402

KEYS = ["name", "type", "op_type"]
COLUMNS = [*KEYS, "primary_category", "duration_ns", "wait_ns", "stream_id", "row_idx", "start_ns", "end_ns"]
PIPES = list(PIPELINE_FIELDS)


def rank_events(work: Path, rows: int) -> pa.Table:
    """One synth rank's normalized events, tiled in time to ``rows`` events."""
    from npuprof.pipeline.runner import StageRange, analyze

    root, out = work / "root", work / "out"
    if not (out / "normalized_events").exists():
        generate(root, "moe_balanced", ranks=2, steps=4, layers=4, trace=False, overwrite=True)
        analyze(root, out, stage_range=StageRange(to_stage="normalize"), overwrite=True)
    import pyarrow.parquet as pq

    base = pq.read_table(out / "normalized_events" / "rank_id=0", columns=[*COLUMNS, *PIPES])
    span = int(pc.max(base["end_ns"]).as_py()) - int(pc.min(base["start_ns"]).as_py()) + 1000
    copies = []
    for index in range(-(-rows // base.num_rows)):
        shift = index * span
        part = base
        for column in ("start_ns", "end_ns"):
            part = part.set_column(part.schema.get_field_index(column), column, pc.add(part[column], shift))
        rows_at = part.schema.get_field_index("row_idx")
        part = part.set_column(rows_at, "row_idx", pc.add(part["row_idx"], index * base.num_rows))
        copies.append(part)
    return pa.concat_tables(copies).slice(0, rows).combine_chunks()


# --- operators -------------------------------------------------------------------------------------


def operators_pandas(table: pa.Table) -> pa.Table:
    events = table.to_pandas()
    frame = events.assign(
        type=events["type"].fillna(""),
        duration_us=events["duration_ns"] / 1000.0,
        wait_us=events["wait_ns"].fillna(0) / 1000.0,
    )
    grouped = frame.groupby(KEYS, sort=False, dropna=False)
    out = grouped.agg(
        primary_category=("primary_category", "first"),
        call_count=("duration_us", "size"),
        duration_sum_us=("duration_us", "sum"),
        wait_sum_us=("wait_us", "sum"),
        stream_count=("stream_id", "nunique"),
        row_start=("row_idx", "min"),
        row_end=("row_idx", "max"),
        first_start_ns=("start_ns", "min"),
        last_end_ns=("end_ns", "max"),
    )
    return pa.Table.from_pandas(out.join(grouped[PIPES].sum(min_count=1)).reset_index(), preserve_index=False)


def operators_polars(table: pa.Table) -> pa.Table:
    import polars as pl

    lazy = pl.from_arrow(table).lazy().with_columns(pl.col("type").fill_null(""))
    out = lazy.group_by(KEYS, maintain_order=True).agg(
        pl.col("primary_category").first(),
        pl.len().alias("call_count"),
        (pl.col("duration_ns").sum() / 1000.0).alias("duration_sum_us"),
        (pl.col("wait_ns").fill_null(0).sum() / 1000.0).alias("wait_sum_us"),
        pl.col("stream_id").drop_nulls().n_unique().alias("stream_count"),
        pl.col("row_idx").min().alias("row_start"),
        pl.col("row_idx").max().alias("row_end"),
        pl.col("start_ns").min().alias("first_start_ns"),
        pl.col("end_ns").max().alias("last_end_ns"),
        *[pl.when(pl.col(p).count() > 0).then(pl.col(p).sum()).alias(p) for p in PIPES],
    )
    return out.collect().to_arrow()


def operators_arrow(table: pa.Table) -> pa.Table:
    typed = table.set_column(table.schema.get_field_index("type"), "type", pc.fill_null(table["type"], ""))
    waits = pc.fill_null(typed["wait_ns"], 0)
    typed = typed.set_column(typed.schema.get_field_index("wait_ns"), "wait_ns", waits)
    aggregations = [
        ("primary_category", "first"),
        ("duration_ns", "count"),
        ("duration_ns", "sum"),
        ("wait_ns", "sum"),
        ("stream_id", "count_distinct"),
        ("row_idx", "min"),
        ("row_idx", "max"),
        ("start_ns", "min"),
        ("end_ns", "max"),
        *[(p, "sum", pc.ScalarAggregateOptions(min_count=1)) for p in PIPES],
    ]
    out = typed.group_by(KEYS, use_threads=False).aggregate(aggregations)  # ordered: first is the first
    names = {
        "primary_category_first": "primary_category",
        "duration_ns_count": "call_count",
        "duration_ns_sum": "duration_sum_us",
        "wait_ns_sum": "wait_sum_us",
        "stream_id_count_distinct": "stream_count",
        "row_idx_min": "row_start",
        "row_idx_max": "row_end",
        "start_ns_min": "first_start_ns",
        "end_ns_max": "last_end_ns",
        **{f"{p}_sum": p for p in PIPES},
    }
    out = out.rename_columns([names.get(c, c) for c in out.column_names])
    for column in ("duration_sum_us", "wait_sum_us"):
        out = out.set_column(out.schema.get_field_index(column), column, pc.divide(out[column], 1000.0))
    return out


def operators_duckdb(table: pa.Table, con) -> pa.Table:
    pipes = ", ".join(f'sum("{p}") AS "{p}"' for p in PIPES)
    sql = f"""
        SELECT name, coalesce(type, '') AS type, op_type, first(primary_category ORDER BY row_idx) AS primary_category,
               count(*) AS call_count, sum(duration_ns) / 1000.0 AS duration_sum_us,
               sum(coalesce(wait_ns, 0)) / 1000.0 AS wait_sum_us, count(DISTINCT stream_id) AS stream_count,
               min(row_idx) AS row_start, max(row_idx) AS row_end, min(start_ns) AS first_start_ns,
               max(end_ns) AS last_end_ns, {pipes}
        FROM events GROUP BY ALL ORDER BY min(row_idx)"""
    con.register("events", table)
    return con.execute(sql).to_arrow_table()


# --- idle gaps ------------------------------------------------------------------------------------


def gaps_pandas(table: pa.Table) -> pa.Table:
    events = table.select(["start_ns", "end_ns"]).to_pandas().sort_values("start_ns", kind="stable")
    starts, ends = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    reach = np.maximum.accumulate(ends)
    idle = starts[1:] > reach[:-1]
    return pa.Table.from_pandas(pd.DataFrame({"start_ns": reach[:-1][idle], "end_ns": starts[1:][idle]}))


def gaps_polars(table: pa.Table) -> pa.Table:
    import polars as pl

    lazy = pl.from_arrow(table.select(["start_ns", "end_ns"])).lazy().sort("start_ns", maintain_order=True)
    lazy = lazy.with_columns(pl.col("end_ns").cum_max().shift(1).alias("reach"))
    gaps = lazy.filter(pl.col("start_ns") > pl.col("reach")).select(
        pl.col("reach").alias("start_ns"), pl.col("start_ns").alias("end_ns")
    )
    return gaps.collect().to_arrow()


def gaps_arrow(table: pa.Table) -> pa.Table:
    ordered = table.select(["start_ns", "end_ns"]).sort_by([("start_ns", "ascending")])
    reach = pc.cumulative_max(ordered["end_ns"])
    before, after = reach.slice(0, len(reach) - 1), ordered["start_ns"].slice(1)
    idle = pc.greater(after, before)
    return pa.table({"start_ns": pc.filter(before, idle), "end_ns": pc.filter(after, idle)})


def gaps_duckdb(table: pa.Table, con) -> pa.Table:
    con.register("events", table.select(["start_ns", "end_ns"]))
    sql = """
        SELECT reach AS start_ns, start_ns AS end_ns FROM (
            SELECT start_ns,
                   max(end_ns) OVER (ORDER BY start_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
            FROM events) WHERE start_ns > reach ORDER BY start_ns"""
    return con.execute(sql).to_arrow_table()


# --- measuring --------------------------------------------------------------------------------------


def _same(tables: dict[str, pa.Table], keys: list[str]) -> None:
    """Every engine's answer equals pandas' (rows in key order, values to 1e-9)."""
    frames = {engine: table.to_pandas() for engine, table in tables.items()}
    reference = frames["pandas"].sort_values(keys, kind="stable").reset_index(drop=True)
    for engine, frame in frames.items():
        ordered = frame[list(reference.columns)].sort_values(keys, kind="stable").reset_index(drop=True)
        for column in reference.columns:
            mine, theirs = ordered[column], reference[column]
            if pd.api.types.is_numeric_dtype(theirs):
                assert np.allclose(mine.astype(float), theirs.astype(float), equal_nan=True), (engine, column)
            else:
                assert mine.astype(str).tolist() == theirs.astype(str).tolist(), (engine, column)


def timed(call, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def measure(table: pa.Table, repeats: int) -> dict:
    import duckdb

    con = duckdb.connect()
    engines = {
        "operators": {
            "pandas": lambda: operators_pandas(table),
            "polars": lambda: operators_polars(table),
            "arrow": lambda: operators_arrow(table),
            "duckdb": lambda: operators_duckdb(table, con),
        },
        "idle gaps": {
            "pandas": lambda: gaps_pandas(table),
            "polars": lambda: gaps_polars(table),
            "arrow": lambda: gaps_arrow(table),
            "duckdb": lambda: gaps_duckdb(table, con),
        },
    }
    result = {}
    for computation, calls in engines.items():
        keys = KEYS if computation == "operators" else ["start_ns"]
        _same({engine: call() for engine, call in calls.items()}, keys)
        seconds = {engine: timed(call, repeats) for engine, call in calls.items()}
        result[computation] = {
            engine: {"ms": round(1000 * s, 2), "over_pandas": round(s / seconds["pandas"], 3)}
            for engine, s in seconds.items()
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--small-rows", type=int, default=1_250)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "engines")
    args = parser.parse_args()
    import duckdb
    import polars

    table = rank_events(args.work, args.rows)
    report = {
        "versions": {
            "pandas": pd.__version__,
            "polars": polars.__version__,
            "pyarrow": pa.__version__,
            "duckdb": duckdb.__version__,
        },
        "rows": args.rows,
        "large": measure(table, args.repeats),
        "small_rows": args.small_rows,
        "small": measure(table.slice(0, args.small_rows), args.repeats * 5),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    sys.exit(main())
