"""The top-level manifest.json of an output dir and the one result object a run prints."""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from npuprof.pipeline import __version__, io, schema
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.sources.discovery import RootInputs
from npuprof.pipeline.stages import STAGES


def file_facts(paths: Iterable[str], hash_sources: bool) -> list[dict]:
    """Size and mtime (and sha256 when asked) of each input file: what the analysis read."""
    facts = []
    for path in sorted(set(paths)):
        try:
            stat = os.stat(path)
        except OSError:
            continue
        entry = {
            "path": path,
            "size": stat.st_size,
            "mtime": datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat(),
        }
        if hash_sources:
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            entry["sha256"] = digest.hexdigest()
        facts.append(entry)
    return facts


def write_top_manifest(
    out: Path,
    top: dict,
    inputs: RootInputs,
    options: AnalyzeOptions,
    executed: list[str],
    timings: dict,
) -> dict:
    """manifest.json: version, options, stage timings, input file facts (written after every run)."""
    input_paths = [p for r in inputs.ranks for p in r.input_files()]
    top = dict(top)
    top.update(
        {
            "npuprof_version": __version__,
            "requested_path": inputs.requested_path,
            "profile_root": inputs.root,
            "collection_manifest": inputs.collection_manifest,
            "options": options.to_dict(),
            "stages_executed": executed,
            "stage_timings": timings,
            "inputs": file_facts(input_paths, options.hash_sources)
            if "normalize" in executed
            else top.get("inputs", []),
            "updated_at": io.utc_now(),
        }
    )
    top.setdefault("created_at", top["updated_at"])
    io.write_json(out / schema.TOP_MANIFEST, top)
    return top


def result_object(out: Path, top: dict) -> dict:
    """The one JSON object printed on success: counts, timings, and each completed stage's headline."""
    counts = io.read_json_or_empty(out / schema.stage_manifest_name("normalize"))
    headlines: dict = {}
    warnings: list[str] = []
    for current in STAGES:
        manifest_path = out / current.manifest_name
        if current.headline is None or not manifest_path.exists():
            continue
        headline, stage_warnings = current.headline(io.read_json(manifest_path))
        headlines[current.name] = headline
        warnings += stage_warnings
    if warnings:
        headlines["warnings"] = warnings
    summary = out / schema.ANALYSIS_SUMMARY
    return {
        # the report stage decides ok / degraded; before it runs, a finished window is ok
        "status": headlines.get("report", {}).get("status", "ok"),
        "output_dir": str(out),
        "profile_root": top.get("profile_root"),
        "rank_count": counts.get("rank_count"),
        "event_count": counts.get("event_count"),
        "stages_executed": top["stages_executed"],
        "stage_timings": {k: top["stage_timings"][k] for k in top["stages_executed"]},
        "notes": counts.get("notes", [])[:20],
        **headlines,
        # one call gives an agent the conclusions
        **({"analysis_summary": io.read_json(summary)} if "report" in headlines and summary.exists() else {}),
    }
