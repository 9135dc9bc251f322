"""``npuprof sweep``: every profiling root under search roots, analyzed in a local process pool."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from npuprof.api.cli.options import (
    add_analyze_options,
    add_command,
    add_json,
    add_progress,
    add_series_key,
    analyze_options,
    check_series_key,
    require_positive,
)
from npuprof.pipeline.errors import EXIT_INTERNAL, EXIT_PARTIAL, EXIT_USAGE, UsageError

QUERY_EXIT_CODES = f"""exit codes:
  0   success
  {EXIT_INTERNAL}   internal error (a bug)
  {EXIT_USAGE}   usage error: ARCHIVE is not a merged sweep archive, the SQL fails (a column or view that does not
      exist), it is not a query (COPY, ATTACH, INSTALL, SET, CREATE, DROP … are refused before anything runs),
      or it ran past --timeout or --memory-limit
"""


def add_parsers(commands) -> None:
    sweep = add_command(
        commands,
        "sweep",
        help="analyze every profiling root under search roots and compare them in one table",
        description="Discover profiling roots (dirs with kernel_details.csv, a profiler db or op_summary csvs; rank "
        "dirs fold into their case root), analyze each into OUT/<root-slug>/ in a local process pool, and write "
        "OUT/sweep_summary.json and OUT/sweep_class_rollup.csv. A failing root never stops the sweep. The analyze "
        "options apply to every root.",
    )
    sweep.add_argument("--search-root", action="append", required=True, help="directory to search (repeatable)")
    sweep.add_argument("-o", "--output", required=True, help="archive directory for per-root outputs and the rollup")
    sweep.add_argument("--jobs", type=int, default=None, help="roots analyzed at once (default: CPU cores)")
    sweep.add_argument(
        "--reuse-existing",
        action="store_true",
        help="skip roots whose output is complete for this npuprof version and options",
    )
    sweep.add_argument("--limit", type=int, default=None, help="analyze at most N roots")
    add_series_key(sweep)
    add_analyze_options(sweep)
    add_progress(sweep)
    add_json(sweep)
    query = add_command(
        commands,
        "query",
        help="run SQL (DuckDB) over a sweep archive's tables",
        description="Run a DuckDB SQL query over a merged sweep archive. Each dataset of ARCHIVE/sweep_data/ is a "
        "view of its name: roots (the rollup, with cohort and outlier columns; step_wall_ms is its step wall "
        "mean), ranks (host, device), step_class_stats, layer_class_stats, block_class_stats, operators, "
        "collectives, time_split, findings, cohorts, cohort_baselines, outliers, fleet_suspects, trends; every row "
        "carries its root's slug, and 'DESCRIBE roots' lists a view's columns. Stdout: "
        "one JSON object with the columns and rows; stderr: the first rows as a table. Example: npuprof query ARCHIVE "
        '"SELECT slug, cohort_id, outlier_score FROM roots ORDER BY outlier_score DESC NULLS LAST LIMIT 5"',
        epilog=QUERY_EXIT_CODES,
    )
    query.add_argument("archive", help="a sweep archive (the -o of npuprof sweep, or a service sweep's archive)")
    query.add_argument("sql", help="the query; quote it for the shell")
    query.add_argument("--csv", metavar="FILE", help="also write the result as CSV to FILE")
    query.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="stop the query after this long (default: %(default)g)",
    )
    query.add_argument(
        "--memory-limit",
        type=int,
        default=768,  # sql_query.DEFAULT_MEMORY_MB (not imported: the CLI starts without pandas)
        metavar="MB",
        help="memory the query may use (default: %(default)s): half for its work, a quarter for its result "
        "(held twice as it is handed back); it never spills to disk",
    )


def run_sweep(args: argparse.Namespace) -> int:
    from npuprof.api.terminal import print_result
    from npuprof.pipeline.progress import make_progress
    from npuprof.pipeline.sweep.local import run_sweep as sweep_roots

    require_positive(args, "jobs", "limit")
    check_series_key(args.series_key)
    missing = [s for s in args.search_root if not Path(s).is_dir()]
    if missing:
        raise UsageError(f"--search-root {missing[0]} is not a directory")
    summary = sweep_roots(
        args.search_root,
        args.output,
        jobs=args.jobs,
        reuse_existing=args.reuse_existing,
        limit=args.limit,
        series_key=args.series_key,
        progress=make_progress(args.progress),
        options=analyze_options(args),
    )
    incomplete = summary["failed_roots"] or summary["missing_roots"]
    result = {"status": "partial" if incomplete else "ok", **summary}
    print_result("sweep", result, args.json)
    return EXIT_PARTIAL if incomplete else 0


def run_query(args: argparse.Namespace) -> int:
    from npuprof.pipeline import csv_formulas, io
    from npuprof.pipeline.sweep.sql_query import query
    from npuprof.pipeline.terminal_text import printable

    if not 0 < args.timeout < float("inf"):
        raise UsageError("--timeout must be a positive number of seconds")
    if args.memory_limit < 16:
        raise UsageError("--memory-limit must be at least 16 (MB)")
    result = query(Path(args.archive), args.sql, timeout_s=args.timeout, memory_mb=args.memory_limit)
    if args.csv:
        try:
            io.write_with(Path(args.csv), lambda tmp: csv_formulas.formula_safe(result).to_csv(tmp, index=False))
        except OSError as exc:  # a full disk, a read-only dir: nothing is left at FILE
            raise UsageError(f"--csv {args.csv}: cannot write it ({exc.strerror or exc})") from None
    # cells are data, not escape codes
    shown = (
        result.head(30).rename(columns=printable).map(lambda cell: printable(cell) if isinstance(cell, str) else cell)
    )
    sys.stderr.write(shown.to_string(index=False, max_colwidth=60) + "\n")
    _print_result_rows(result)
    return 0


def _print_result_rows(result) -> None:  # noqa: ANN001 - a DataFrame (pandas is imported lazily)
    """The query's JSON object on stdout, its rows written a slice at a time: the whole result as one
    JSON text, and then as Python objects, would take several times the memory the result does."""
    from npuprof.pipeline.json_text import json_text

    head = json_text({"status": "ok", "row_count": len(result), "columns": list(result.columns), "rows": []})
    sys.stdout.write(head[: -len("[]}")] + "[")
    for start in range(0, len(result), 10_000):
        rows = json.loads(result.iloc[start : start + 10_000].to_json(orient="records", date_format="iso"))
        sys.stdout.write((", " if start else "") + json_text(rows)[1:-1])
    sys.stdout.write("]}\n")
    sys.stdout.flush()


HANDLERS = {"sweep": run_sweep, "query": run_query}
