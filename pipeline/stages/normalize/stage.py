"""normalize: any profiling root → one columnar event table, every event traceable to its source row.

Map (per rank): pick the kernel source (profiler db or kernel_details.csv / op_summary csv), read
it, add op_type, categories and roles, and return the rank's ``normalized_events`` partition.
Reduce (per root): ``source_index.json`` and ``normalize_manifest.json``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline import schema
from npuprof.pipeline.device_order import in_device_order
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.kernel_categories import categorize, op_types
from npuprof.pipeline.sources.aicore_freq import read_aicore_freq
from npuprof.pipeline.sources.auxiliary import note_text, unreadable_note
from npuprof.pipeline.sources.capture_info import capture_info
from npuprof.pipeline.sources.coherence import check_one_capture
from npuprof.pipeline.sources.discovery import TRACE_VIEW, RankInput
from npuprof.pipeline.sources.integrity import check_unchanged, drop_exact_duplicates
from npuprof.pipeline.sources.kernel_csv import read_kernel_csv
from npuprof.pipeline.sources.profiler_db import probe, read_profiler_db
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult
from npuprof.pipeline.stages.normalize.long_tasks import body_span_ns, quarantine_long_tasks

_AIV_STAGES = ("aiv_vec_time_us", "aiv_mte2_time_us", "aiv_mte3_time_us", "aiv_scalar_time_us")


def _pick_source(rank: RankInput, source: str) -> tuple[str, list[Path], str]:
    """(kind, paths, reason) of the kernel source to read for ``rank`` under ``--source``."""
    csvs = [Path(rank.kernel_csv)] if rank.kernel_csv else [Path(p) for p in rank.op_summary_csvs]
    csv_kind = "kernel_details_csv" if rank.kernel_csv else "op_summary_csv"
    if len(rank.profiler_dbs) > 1 and source != "csv":
        raise BadInput(
            rank.rank_dir,
            "several profiler dbs in one rank dir, cannot tell which to read: "
            + ", ".join(Path(d).name for d in rank.profiler_dbs),
        )
    db = Path(rank.profiler_dbs[0]) if rank.profiler_dbs else None
    if source == "csv":
        if not csvs:
            raise BadInput(rank.rank_dir, "--source csv: no kernel_details.csv or op_summary csv in this rank dir")
        return csv_kind, csvs, "--source csv"
    if source == "db":
        if db is None:
            raise BadInput(rank.rank_dir, "--source db: no profiler db in this rank dir")
        checked = probe(db)
        if not checked.ok:
            raise BadInput(db, f"cannot read profiler db: {checked.reason}")
        return "profiler_db", [db], "--source db"
    if db is not None:
        checked = probe(db)
        if checked.ok:
            return (
                "profiler_db",
                [db],
                "profiler db passed the schema probe "
                f"(SCHEMA_VERSION {checked.schema_version or 'none, columns probed'})",
            )
        if csvs:
            return csv_kind, csvs, f"profiler db {db.name} failed the schema probe ({checked.reason}); fell back to CSV"
        raise BadInput(db, f"cannot read profiler db: {checked.reason}")
    return csv_kind, csvs, "no profiler db; CSV"


def _empty_events() -> pa.Table:
    return schema.EVENT_SCHEMA.empty_table()


def _null_strings(n: int) -> pa.Array:
    return pa.nulls(n, pa.string())


def _aiv_work(table: pa.Table) -> np.ndarray:
    """True where the task did AIV work: aiv_time or any AIV pipeline stage above zero."""
    work = np.zeros(table.num_rows, dtype=bool)
    for field in ("aiv_time_us", *_AIV_STAGES):
        if field in table.column_names:
            work |= pc.fill_null(pc.greater(table.column(field), 0.0), False).to_numpy(zero_copy_only=False)
    return work


def _finish_events(table: pa.Table, source_id: str) -> pa.Table:
    """Add op_type, categories, roles; conform to EVENT_SCHEMA (missing columns become null)."""
    n = table.num_rows

    def column(name: str) -> pa.ChunkedArray | pa.Array:
        return table.column(name) if name in table.column_names else _null_strings(n)

    categories, roles, primary = categorize(column("name"), column("type"), column("accelerator_core"))
    columns = {}
    for field in schema.EVENT_SCHEMA:
        if field.name in table.column_names:
            columns[field.name] = table.column(field.name).cast(field.type)
        else:
            columns[field.name] = pa.nulls(n, field.type)
    columns["source_id"] = pa.repeat(pa.scalar(source_id, pa.string()), n)
    columns["op_type"] = op_types(column("accelerator_core"), _aiv_work(table))
    columns["categories"] = categories
    columns["roles"] = roles
    columns["primary_category"] = primary
    if "end_ns" not in table.column_names:
        columns["end_ns"] = pc.add(columns["start_ns"], columns["duration_ns"])
    return pa.table(columns, schema=schema.EVENT_SCHEMA)


def _rank_summary(
    rank: RankInput, events: pa.Table, kind: str, paths: list[Path], reason: str, notes: list[str], facts: dict
) -> dict:
    op_type = events.column("op_type")
    compute = pc.invert(pc.is_in(op_type, pa.array(["communication"])))
    has_pipeline = None
    for field in schema.PIPELINE_FIELDS:
        valid = pc.is_valid(events.column(field))
        has_pipeline = valid if has_pipeline is None else pc.or_(has_pipeline, valid)
    compute_count = pc.sum(compute).as_py() or 0
    covered = pc.sum(pc.and_(compute, has_pipeline)).as_py() or 0 if events.num_rows else 0
    start = pc.min(events.column("start_ns")).as_py() if events.num_rows else None
    end = pc.max(events.column("end_ns")).as_py() if events.num_rows else None
    starts, ends = (events.column(c).to_numpy(zero_copy_only=False) for c in ("start_ns", "end_ns"))
    body_start, body_end = body_span_ns(starts, ends)
    counts = {row["values"]: row["counts"] for row in pc.value_counts(op_type).to_pylist()} if events.num_rows else {}
    steps = pc.unique(events.column("step_id")).drop_null().to_pylist() if events.num_rows else []
    devices = pc.unique(events.column("device_id")).drop_null().to_pylist() if events.num_rows else []
    return {
        "rank_id": rank.rank_id,
        "rank_dir": rank.rank_dir,
        "source_kind": kind,
        "source_paths": [str(p) for p in paths],
        "source_choice": reason,
        "event_count": events.num_rows,
        "compute_event_count": int(compute_count),
        "communication_event_count": int(events.num_rows - compute_count),
        "op_type_counts": {k: int(v) for k, v in sorted(counts.items())},
        "step_ids": sorted(int(s) for s in steps),
        "device_ids": sorted(int(d) for d in devices),  # the kernel source's Device_id column
        "start_ns": start,
        # the rank's main stretch, a few far-off rows aside: when it ran (coherence, the capture's span)
        "body_start_ns": body_start,
        "body_end_ns": body_end,
        "end_ns": end,
        "span_us": (end - start) / 1000 if start is not None else None,
        "pipeline_event_count": int(covered),
        "pipeline_coverage": (covered / compute_count) if compute_count else None,
        "quarantined_rows": facts.get("quarantined_rows", []),
        "long_tasks_quarantined": facts.get("long_tasks_quarantined", []),
        "quarantine_notes": facts.get("quarantine_notes", []),
        "duplicate_rows_dropped": facts.get("duplicate_rows_dropped", 0),
        "header_columns": facts.get("header_columns"),
        "db_schema_version": facts.get("schema_version"),
        "notes": notes,
    }


def _read_source(path: Path, kind: str, recorded: object, notes: list[str], facts: dict) -> pa.Table:
    """One kernel source's rows, checked unchanged over the read; exact duplicates dropped and tasks that
    outlast the capture quarantined, each with its note (``notes``) and count (``facts``)."""
    check_unchanged(path, recorded)
    if kind == "profiler_db":
        table, file_facts = read_profiler_db(path)
        notes.extend(file_facts.get("notes", []))
        facts["schema_version"] = file_facts.get("schema_version")
    else:
        table, file_facts = read_kernel_csv(path)
        facts["header_columns"] = file_facts["header_columns"]
        for q in file_facts["quarantined_rows"]:
            facts["quarantined_rows"].append({**q, "path": str(path)})
            notes.append(
                f"{path.name} line {q['line']}: {q['fields']} fields instead of {q['expected_fields']}; "
                "row quarantined (not an event)"
            )
    check_unchanged(path, recorded)  # again: a file that grew during the read is not what was read
    table, repeated = drop_exact_duplicates(table)
    if len(repeated):
        facts["duplicate_rows_dropped"] = facts.get("duplicate_rows_dropped", 0) + len(repeated)
        where = "lines" if kind != "profiler_db" else "rows"
        shown = ", ".join(str(int(r) + (2 if kind != "profiler_db" else 0)) for r in repeated[:5])
        notes.append(
            f"{path.name}: {len(repeated)} duplicate row{'s' if len(repeated) > 1 else ''} dropped "
            f"(identical to an earlier row; {where} {shown}{', ...' if len(repeated) > 5 else ''})"
        )
    table, long_rows, long_notes = quarantine_long_tasks(table, path, kind)
    facts["long_tasks_quarantined"] = facts.get("long_tasks_quarantined", []) + [
        {**row, "path": str(path)} for row in long_rows
    ]
    notes.extend(long_notes)
    facts["quarantine_notes"] = facts.get("quarantine_notes", []) + long_notes  # warnings in the result
    return table


def _aicore_freq(ctx: RankContext, kind: str, paths: list[Path]) -> tuple[pa.Table, dict, list[dict]]:
    """The rank's AI Core frequency samples, from the same export as its kernels: the profiler db's
    table when the db is the kernel source, else trace_view.json's counters (unless --no-host-trace)."""
    rank = ctx.rank
    trace = rank.supplemental.get(TRACE_VIEW) if ctx.options.host_trace else None
    db = str(paths[0]) if kind == "profiler_db" else None
    samples, path, failed = read_aicore_freq(db, trace)
    unreadable = [unreadable_note(rank.rank_id, p, BadInput(p, why), fallback) for p, why, fallback in failed]
    source_id = f"r{rank.rank_id}:{'profiler_db' if path == db and db else TRACE_VIEW}"
    table = schema.AICORE_FREQ.conform(samples.assign(source_id=source_id))
    facts = {"samples": len(samples), "source_path": path}
    if len(samples):
        facts.update(min_mhz=float(samples["freq_mhz"].min()), max_mhz=float(samples["freq_mhz"].max()))
    return table, facts, unreadable


def map_rank(ctx: RankContext) -> StageResult:
    """Normalize one rank's kernel source into its ``normalized_events`` partition."""
    rank = ctx.rank
    if not rank.has_kernel_source():
        events = _empty_events()
        note = (
            "no kernel_details.csv, op_summary csv or profiler db: "
            "this rank has no device events (communication files only)"
        )
        summary = _rank_summary(rank, events, "none", [], "no kernel source", [note], {})
        tables = {schema.NORMALIZED_EVENTS: events, schema.AICORE_FREQ: schema.AICORE_FREQ.schema.empty_table()}
        return StageResult(tables=tables, manifest=summary)
    kind, paths, reason = _pick_source(rank, ctx.options.source)
    notes: list[str] = []
    tables = []
    facts: dict = {"quarantined_rows": []}
    sources = []
    for index, path in enumerate(paths):
        source_id = f"r{rank.rank_id}:{kind}" + (f":{index}" if len(paths) > 1 else "")
        table = _read_source(path, kind, rank.source_states.get(str(path)), notes, facts)
        tables.append(_finish_events(table, source_id))
        sources.append(
            {
                "source_id": source_id,
                "kind": kind,
                "path": str(path),
                "rank_id": rank.rank_id,
                "row_start": 0,
                "row_end": int(pc.max(table.column("row_idx")).as_py()) + 1 if table.num_rows else 0,
            }
        )
    events = in_device_order(pa.concat_tables(tables) if len(tables) > 1 else tables[0])  # positions index it
    freq, freq_facts, unreadable = _aicore_freq(ctx, kind, paths)
    summary = _rank_summary(rank, events, kind, paths, reason, notes, facts)
    summary.update(sources=sources, aicore_freq=freq_facts, unreadable_inputs=unreadable)
    return StageResult(tables={schema.NORMALIZED_EVENTS: events, schema.AICORE_FREQ: freq}, manifest=summary)


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """normalize's part of the result JSON: the tasks left out for lasting far past the capture, each a
    warning (a corrupt duration must not pass as a healthy capture)."""
    ranks = manifest["rank_summaries"]
    left_out = sum(len(r.get("long_tasks_quarantined", [])) for r in ranks)
    warnings = [f"normalize: rank {r['rank_id']}: {note}" for r in ranks for note in r.get("quarantine_notes", [])]
    return {"long_tasks_quarantined": left_out}, warnings


def reduce_root(ctx: RootContext) -> StageResult:
    """source_index.json and normalize_manifest.json from the per-rank results."""
    ranks = sorted(ctx.rank_manifests, key=lambda m: m["rank_id"])
    sources = [s for m in ranks for s in m.pop("sources", [])]
    for rank in ctx.inputs.ranks:
        for kind, path in sorted(rank.supplemental.items()):
            sources.append(
                {"source_id": f"r{rank.rank_id}:{kind}", "kind": kind, "path": path, "rank_id": rank.rank_id}
            )
    event_count = sum(m["event_count"] for m in ranks)
    pipeline_events = sum(m["pipeline_event_count"] for m in ranks)
    compute_events = sum(m["compute_event_count"] for m in ranks)
    manifest = {
        "profile_root": ctx.inputs.root,
        "rank_count": len(ranks),
        "ranks_with_events": sum(1 for m in ranks if m["event_count"]),
        "event_count": event_count,
        "pipeline_event_count": pipeline_events,
        "pipeline_coverage": (pipeline_events / compute_events) if compute_events else None,
        "time_unit": "int64 ns (start_ns, end_ns, duration_ns, wait_ns); pipeline fields float64 us",
        "rank_summaries": ranks,
        "notes": [f"rank {m['rank_id']}: {n}" for m in ranks for n in m["notes"]],
    }
    capture = capture_info(ctx.inputs)
    check_one_capture(ctx.inputs.root, ranks, capture)  # before anything is written as one capture
    unreadable = [note for m in ranks for note in m.get("unreadable_inputs", [])]
    unreadable += [note for rank in capture["ranks"] for note in rank.get("unreadable", [])]
    manifest["unreadable_inputs"] = unreadable
    manifest["notes"] += [note_text(note) for note in unreadable]
    manifest["notes"] += [
        (
            f"{link}: a symlinked directory, not searched for ranks (analyze its target as a root of its own)"
            if os.path.exists(link)
            else f"{link}: a link that leads nowhere (a loop, or its target is gone): ignored"
        )
        for link in ctx.inputs.symlinks_not_followed
    ]
    source_index = {"profile_root": ctx.inputs.root, "inputs": ctx.inputs.to_dict(), "sources": sources}
    json_files = {schema.SOURCE_INDEX: source_index, schema.CAPTURE_INFO: capture}
    return StageResult(json_files=json_files, manifest=manifest)
