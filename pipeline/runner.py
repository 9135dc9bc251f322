"""The stage runner: ``analyze()`` is the one entry point the CLI, ``npuprof demo``, the local sweep
and the service share.

It prepares the output dir, resolves the stage window (``window``), maps rank-local stages over
ranks and reduces once per root (``execution``), and writes manifest.json and the result object
(``manifests``). On failure it leaves failure.json and no artifact of the failed stage.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import NpuprofError, UsageError, failure_object, traceback_of
from npuprof.pipeline.execution import clear_stage_outputs, guard, map_ranks, run_root_stage
from npuprof.pipeline.manifests import result_object, write_top_manifest
from npuprof.pipeline.progress import Progress, no_progress
from npuprof.pipeline.sources.discovery import RootInputs, discover
from npuprof.pipeline.stages import STAGES, not_built_after
from npuprof.pipeline.stages.base import AnalyzeOptions, Stage
from npuprof.pipeline.window import StageWindow, check_prerequisites, resolve_window

__all__ = ["StageWindow", "analyze", "finish_root", "write_failure"]


def prepare_output_dir(out_dir: Path, window: StageWindow, overwrite: bool) -> None:
    """Refuse a non-empty output dir unless asked to overwrite it or to resume a stage window."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"output path {out_dir} exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if overwrite:
            for registered in STAGES:
                clear_stage_outputs(out_dir, registered)
            for name in (schema.TOP_MANIFEST, schema.FAILURE_JSON):
                if (out_dir / name).exists():
                    (out_dir / name).unlink()
        elif not window.resumes:
            raise UsageError(
                f"output dir {out_dir} is not empty; pass --overwrite to replace it, "
                "or --from-stage / --only-stage to resume"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / schema.FAILURE_JSON).exists():
        (out_dir / schema.FAILURE_JSON).unlink()


def load_inputs(out_dir: Path) -> RootInputs:
    """The discovered inputs recorded by an earlier normalize run (for later stage windows)."""
    data = io.read_json(out_dir / schema.SOURCE_INDEX)
    return RootInputs.from_dict(data["inputs"])


def write_failure(out: Path, exc: NpuprofError) -> dict:
    """Write failure.json for ``exc`` and return the failure object (without the traceback)."""
    failure = failure_object(exc)
    io.write_failure(out, failure, traceback_of(exc))
    return failure


def analyze(
    root: str | Path | None,
    out_dir: str | Path,
    *,
    options: AnalyzeOptions = AnalyzeOptions(),
    window: StageWindow = StageWindow(),
    jobs: int | None = None,
    overwrite: bool = False,
    progress: Progress = no_progress,
) -> dict:
    """Analyze one profiling root into ``out_dir``; returns the result object the CLI prints.

    Raises ``StageFailed`` (with the phase) or another ``NpuprofError``; in both cases a
    ``failure.json`` is left in ``out_dir`` when the dir could be prepared.
    """
    out = Path(out_dir)
    stages, not_built = resolve_window(window)
    prepare_output_dir(out, window, overwrite)
    try:
        return _analyze(root, out, stages, not_built, options, window, jobs or os.cpu_count() or 1, progress)
    except NpuprofError as exc:
        write_failure(out, exc)
        raise


def _analyze(
    root: str | Path | None,
    out: Path,
    stages: list[Stage],
    not_built: list[str],
    options: AnalyzeOptions,
    window: StageWindow,
    jobs: int,
    progress: Progress,
) -> dict:
    check_prerequisites(out, stages)
    if stages[0].name == "normalize":
        if root is None:
            raise UsageError("a profiling root is required to run normalize")
        progress("discover", 0, 1, str(root))
        inputs = guard("discover", None, discover, root)
        progress("discover", 1, 1, f"{len(inputs.ranks)} ranks")
    else:
        inputs = guard("load", None, load_inputs, out)

    top = io.read_json_or_empty(out / schema.TOP_MANIFEST) if window.resumes else {}
    timings: dict = dict(top.get("stage_timings", {}))
    executed: list[str] = []
    for current in stages:
        clear_stage_outputs(out, current)
        started = time.perf_counter()
        try:
            rank_manifests = map_ranks(current, out, inputs, options, jobs, progress) if current.map_rank else []
            map_seconds = time.perf_counter() - started
            guard(
                current.name,
                None,
                run_root_stage,
                current.name,
                str(out),
                inputs.to_dict(),
                options.to_dict(),
                rank_manifests,
                map_seconds,
            )
        except NpuprofError:
            clear_stage_outputs(out, current)
            raise
        timings[current.name] = round(time.perf_counter() - started, 4)
        executed.append(current.name)

    top = write_top_manifest(out, top, inputs, options, executed, timings, not_built)
    return result_object(out, top)


def finish_root(out_dir: str, inputs: dict, options: dict, stage_names: list[str], rank_results: list[dict]) -> dict:
    """The reduce units of ``stage_names`` in order, then manifest.json: the service's root task.

    ``rank_results`` are the dicts ``execution.run_rank_chain`` returned, one per rank.
    """
    out = Path(out_dir)
    timings = {}
    for name in stage_names:
        manifests = [r[name] for r in rank_results if name in r]
        map_seconds = max((m.get("seconds", 0.0) for m in manifests), default=0.0)
        started = time.perf_counter()
        guard(name, None, run_root_stage, name, out_dir, inputs, options, manifests, map_seconds)
        timings[name] = round(map_seconds + time.perf_counter() - started, 4)
    top = write_top_manifest(
        out,
        {},
        RootInputs.from_dict(inputs),
        AnalyzeOptions.from_dict(options),
        list(stage_names),
        timings,
        not_built_after(None),
    )
    return result_object(out, top)
