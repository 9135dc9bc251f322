"""What a command does beyond one pipeline call: the demo and its directory rule, and compare's
"analyze a profiling root first". The CLI parses arguments and calls these; so can a notebook."""

from __future__ import annotations

from pathlib import Path

from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import UsageError
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.progress import Progress
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.synth import SCENARIOS, generate

DEMO_MARKER = ".npuprof-demo"


def run_demo(work: Path, progress: Progress) -> dict:
    """Generate the demo scenario under ``work``/root and analyze it into ``work``/analysis.

    ``work`` must be empty, new, or an earlier demo dir (it holds DEMO_MARKER): a demo never
    overwrites a directory it did not make.
    """
    if work.exists() and any(work.iterdir()) and not (work / DEMO_MARKER).exists():
        raise UsageError(f"npuprof demo: {work} exists and is not an earlier demo dir; pass another --dir")
    work.mkdir(parents=True, exist_ok=True)
    (work / DEMO_MARKER).write_text("written by npuprof demo; safe to delete\n")
    root, out = work / "root", work / "analysis"
    progress("synth", 0, 1, "demo scenario")
    generated = generate(root, "demo", overwrite=True)
    progress("synth", 1, 1, f"{generated['rows']} rows")
    result = analyze(root, out, overwrite=True, progress=progress)
    truth = io.read_json(root / "ground_truth.json")
    result["demo"] = {
        "root": str(root),
        "ground_truth": str(root / "ground_truth.json"),
        "planted": SCENARIOS["demo"].description,
        "events_parquet": str(out / schema.NORMALIZED_EVENTS),
        "planted_findings": planted_found(truth["expected_findings"], (result.get("analysis_summary") or {})),
    }
    return result


def planted_found(expected: list[dict], summary: dict) -> list[dict]:
    """Each planted fault (ground_truth.json's expected findings) and whether the analysis found it: a
    finding of its type — or one that told the same cost and took it in (``merged``) — whose ranks
    include the planted ones (any ranks, for a fault planted on none)."""
    groups = summary.get("findings", [])
    rows = []
    for fault in expected:
        ranks = set(fault.get("ranks") or [])
        found = any(
            fault["type"] in {g["finding_type"], *(m["finding_type"] for m in g.get("merged", []))}
            and ranks <= set(g["affected"]["rank_ids"])
            for g in groups
        )
        rows.append({"type": fault["type"], "ranks": sorted(ranks), "found": found})
    return rows


def analyzed_output(path: str, out: Path, side: str, progress: Progress) -> Path:
    """``path`` if it is an analyzed output dir, else the profiling root analyzed into OUT/<side>
    (resumed when an earlier compare got that far)."""
    if (Path(path) / schema.stage_manifest_name("model")).exists():
        return Path(path)
    if not Path(path).is_dir():
        raise UsageError(f"npuprof compare: {path} is neither an npuprof output dir nor a profiling root")
    target = out / side
    resume = (target / schema.stage_manifest_name("model")).exists()
    if not resume:
        analyze(
            path,
            target,
            options=AnalyzeOptions(),
            stage_range=StageRange(),
            progress=progress,
            overwrite=target.exists(),
        )
    return target
