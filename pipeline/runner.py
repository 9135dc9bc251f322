"""The stage runner: map rank-local stages over ranks, reduce cluster stages once per root.

``analyze()`` is the one entry point the CLI, ``npuprof demo`` and the service share. The per-rank
and per-root units (``run_rank_stage`` / ``run_root_stage``) take and return only small, picklable
values, so a process pool here and a Celery worker later run exactly the same code; each writes its
own artifacts straight into the output dir, atomically, and returns a small manifest dict.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import sys
import time
import traceback
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from npuprof.pipeline import __version__, atomic, schema
from npuprof.pipeline.errors import MissingPrerequisites, NpuprofError, StageFailed, UsageError
from npuprof.pipeline.progress import Progress, no_progress
from npuprof.pipeline.sources.discovery import RankInput, RootInputs, discover, read_json
from npuprof.pipeline.stages import STAGE_NAMES, STAGES, stage
from npuprof.pipeline.stages.base import AnalyzeOptions, RankContext, RootContext, Stage, StageResult


@dataclass(frozen=True)
class StageWindow:
    """Which stages to run: the whole built pipeline, or a --from/--to/--only window."""

    from_stage: str | None = None
    to_stage: str | None = None
    only_stage: str | None = None

    @property
    def resumes(self) -> bool:
        """True when the window builds on artifacts of an earlier run."""
        return self.only_stage is not None or self.from_stage is not None


def resolve_window(window: StageWindow) -> tuple[list[Stage], list[str]]:
    """(stages to run, registered stages after them that are not built yet)."""
    for name in (window.from_stage, window.to_stage, window.only_stage):
        if name is not None and name not in STAGE_NAMES:
            raise UsageError(f"unknown stage {name!r}; stages are: {', '.join(STAGE_NAMES)}")
    if window.only_stage and (window.from_stage or window.to_stage):
        raise UsageError("--only-stage cannot be combined with --from-stage or --to-stage")
    built = [s.name for s in STAGES if s.built]
    if window.only_stage:
        names = [window.only_stage]
    else:
        first = STAGE_NAMES.index(window.from_stage) if window.from_stage else 0
        last = STAGE_NAMES.index(window.to_stage) if window.to_stage else STAGE_NAMES.index(built[-1])
        if last < first:
            raise UsageError(f"--to-stage {window.to_stage} comes before --from-stage {window.from_stage}")
        names = list(STAGE_NAMES[first : last + 1])
    unbuilt = [n for n in names if not stage(n).built]
    if unbuilt:
        raise UsageError(
            f"stage {unbuilt[0]!r} is not built yet in npuprof {__version__} "
            f"(built stages: {', '.join(built)})"
        )
    end = STAGE_NAMES.index(names[-1])
    not_built_after = [s.name for s in STAGES[end + 1 :] if not s.built]
    return [stage(n) for n in names], not_built_after


def check_prerequisites(out_dir: Path, stages: list[Stage]) -> None:
    """Every artifact a selected stage needs exists, or an earlier selected stage makes it."""
    will_exist: set[str] = set()
    for current in stages:
        missing = [a for a in current.requires if a not in will_exist and not (out_dir / a).exists()]
        if missing:
            raise MissingPrerequisites(current.name, missing)
        will_exist.update(current.produces)
        will_exist.add(schema.stage_manifest_name(current.name))


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def clear_stage_outputs(out_dir: Path, current: Stage) -> None:
    """Un-mark a stage (manifest first, so a crash never leaves it looking complete), then drop its artifacts."""
    _remove(out_dir / schema.stage_manifest_name(current.name))
    for artifact in current.produces:
        _remove(out_dir / artifact)


def _write_result(out_dir: Path, result: StageResult, rank_id: int | None) -> None:
    for table_name, table in result.tables.items():
        if rank_id is not None:
            target = out_dir / schema.rank_partition_dir(table_name, rank_id) / "part-0.parquet"
        else:
            target = out_dir / f"{table_name}.parquet"
        atomic.write_parquet(target, table)
    for name, frame in result.csv_views.items():
        atomic.write_csv(out_dir / name, frame)
    for name, payload in result.json_files.items():
        atomic.write_json(out_dir / name, payload)


def run_rank_stage(stage_name: str, out_dir: str, rank: dict, options: dict) -> dict:
    """Map unit: run ``stage_name`` for one rank, write its partitions, return its manifest entry."""
    current = stage(stage_name)
    ctx = RankContext(Path(out_dir), RankInput(**rank), AnalyzeOptions.from_dict(options))
    started = time.perf_counter()
    result = current.map_rank(ctx)
    _write_result(Path(out_dir), result, rank_id=ctx.rank.rank_id)
    manifest = dict(result.manifest)
    manifest.setdefault("rank_id", ctx.rank.rank_id)
    manifest["seconds"] = round(time.perf_counter() - started, 4)
    return manifest


def run_root_stage(stage_name: str, out_dir: str, inputs: dict, options: dict, rank_manifests: list[dict], seconds: float = 0.0) -> dict:
    """Reduce unit: run the cluster-level part of ``stage_name`` and write its manifest last."""
    current = stage(stage_name)
    out = Path(out_dir)
    started = time.perf_counter()
    manifest: dict = {}
    if current.reduce_root is not None:
        ctx = RootContext(out, RootInputs.from_dict(inputs), AnalyzeOptions.from_dict(options), rank_manifests)
        result = current.reduce_root(ctx)
        _write_result(out, result, rank_id=None)
        manifest = dict(result.manifest)
    elif rank_manifests:
        manifest = {"ranks": rank_manifests}
    total = seconds + time.perf_counter() - started
    manifest = {"stage": stage_name, "npuprof_version": __version__, "completed_at": _now(), "seconds": round(total, 4), **manifest}
    atomic.write_json(out / schema.stage_manifest_name(stage_name), manifest)
    return manifest


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _rank_weight(rank: RankInput) -> int:
    total = 0
    for path in (rank.kernel_csv, *rank.profiler_dbs, *rank.op_summary_csvs):
        if path:
            try:
                total += os.path.getsize(path)
            except OSError:
                pass
    return total


def _map_ranks(current: Stage, out_dir: Path, inputs: RootInputs, options: AnalyzeOptions, jobs: int, progress: Progress) -> list[dict]:
    """Run the map part of ``current`` over every rank, in a process pool when it pays."""
    ranks = sorted(inputs.ranks, key=_rank_weight, reverse=True)  # biggest first balances the pool
    total = len(ranks)
    progress(current.name, 0, total, "ranks")
    results: list[dict] = []
    workers = max(1, min(jobs, total))
    if not current.map_in_threads and not _main_is_importable():
        workers = 1  # e.g. `python - < script`: a process pool could not re-import __main__
    if workers == 1:
        for done, rank in enumerate(ranks, start=1):
            results.append(_guard(current.name, rank.rank_id, run_rank_stage, current.name, str(out_dir), vars(rank), options.to_dict()))
            progress(current.name, done, total, f"rank {rank.rank_id}")
        return results
    if current.map_in_threads:
        pool_cm = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"npuprof-{current.name}")
    else:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["npuprof.pipeline.runner"])
        pool_cm = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    with pool_cm as pool:
        futures = {pool.submit(run_rank_stage, current.name, str(out_dir), vars(rank), options.to_dict()): rank.rank_id for rank in ranks}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in finished:
                rank_id = futures[future]
                if future.exception() is not None:
                    for other in pending:
                        other.cancel()
                    _guard(current.name, rank_id, _reraise, future.exception())
                results.append(future.result())
                progress(current.name, len(results), total, f"rank {rank_id}")
    return results


def _main_is_importable() -> bool:
    """Whether pool children can re-create ``__main__`` (not so for code read from stdin)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path is None or os.path.exists(path)


def _reraise(exc: BaseException) -> None:
    raise exc


def _guard(stage_name: str, rank_id: int | None, fn, *args):
    """Run ``fn``; turn any failure into a StageFailed that names the phase (stage and rank)."""
    phase = stage_name if rank_id is None else f"{stage_name} (rank {rank_id})"
    try:
        return fn(*args)
    except StageFailed:
        raise
    except NpuprofError as exc:
        raise StageFailed(phase, exc) from exc
    except Exception as exc:  # a bug: keep the traceback for failure.json, show one line
        error = NpuprofError(f"internal error: {type(exc).__name__}: {exc}")
        error.traceback = traceback.format_exc()
        raise StageFailed(phase, error) from exc


def _file_facts(paths: Iterable[str], hash_sources: bool) -> list[dict]:
    facts = []
    for path in sorted(set(paths)):
        try:
            stat = os.stat(path)
        except OSError:
            continue
        entry = {"path": path, "size": stat.st_size, "mtime": datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat()}
        if hash_sources:
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            entry["sha256"] = digest.hexdigest()
        facts.append(entry)
    return facts


def prepare_output_dir(out_dir: Path, window: StageWindow, overwrite: bool) -> None:
    """Refuse a non-empty output dir unless asked to overwrite it or to resume a stage window."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"output path {out_dir} exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if overwrite:
            for registered in STAGES:
                clear_stage_outputs(out_dir, registered)
            for name in (schema.TOP_MANIFEST, schema.FAILURE_JSON):
                _remove(out_dir / name)
        elif not window.resumes:
            raise UsageError(f"output dir {out_dir} is not empty; pass --overwrite to replace it, or --from-stage / --only-stage to resume")
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove(out_dir / schema.FAILURE_JSON)


def load_inputs(out_dir: Path) -> RootInputs:
    """The discovered inputs recorded by an earlier normalize run (for later stage windows)."""
    data = read_json(out_dir / schema.SOURCE_INDEX)
    return RootInputs.from_dict(data["inputs"])


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


def write_failure(out: Path, exc: NpuprofError) -> dict:
    """Write failure.json (phase, kind, one-line error) and return the failure object."""
    failure = failure_object(exc)
    payload = dict(failure)
    if getattr(getattr(exc, "cause", exc), "traceback", None):
        payload["traceback"] = exc.cause.traceback
    payload["failed_at"] = _now()
    atomic.write_json(out / schema.FAILURE_JSON, payload)
    return failure


def failure_object(exc: NpuprofError) -> dict:
    """The one JSON object printed on failure."""
    phase = exc.phase if isinstance(exc, StageFailed) else getattr(exc, "phase", "setup")
    return {"status": "failed", "phase": phase, "exit_code": exc.exit_code, **exc.as_dict()}


def _analyze(root, out: Path, stages: list[Stage], not_built: list[str], options: AnalyzeOptions, window: StageWindow, jobs: int, progress: Progress) -> dict:
    check_prerequisites(out, stages)
    if stages[0].name == "normalize":
        if root is None:
            raise UsageError("a profiling root is required to run normalize")
        progress("discover", 0, 1, str(root))
        inputs = _guard("discover", None, discover, root)
        progress("discover", 1, 1, f"{len(inputs.ranks)} ranks")
    else:
        inputs = _guard("load", None, load_inputs, out)

    top_path = out / schema.TOP_MANIFEST
    top = read_json(top_path) if top_path.exists() and window.resumes else {}
    timings: dict = dict(top.get("stage_timings", {}))
    executed: list[str] = []
    for current in stages:
        clear_stage_outputs(out, current)
        started = time.perf_counter()
        try:
            rank_manifests = _map_ranks(current, out, inputs, options, jobs, progress) if current.map_rank else []
            map_seconds = time.perf_counter() - started
            _guard(current.name, None, run_root_stage, current.name, str(out), inputs.to_dict(), options.to_dict(), rank_manifests, map_seconds)
        except NpuprofError:
            clear_stage_outputs(out, current)
            raise
        timings[current.name] = round(time.perf_counter() - started, 4)
        executed.append(current.name)

    top = write_top_manifest(out, top, inputs, options, executed, timings, not_built)
    return result_object(out, top)


def write_top_manifest(out: Path, top: dict, inputs: RootInputs, options: AnalyzeOptions, executed: list[str], timings: dict, not_built: list[str]) -> dict:
    """manifest.json: version, options, stage timings, input file facts (written after every stage)."""
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
            "stages_not_built": not_built,
            "inputs": _file_facts(input_paths, options.hash_sources) if "normalize" in executed else top.get("inputs", []),
            "updated_at": _now(),
        }
    )
    top.setdefault("created_at", top["updated_at"])
    atomic.write_json(out / schema.TOP_MANIFEST, top)
    return top


def run_rank_chain(out_dir: str, rank: dict, options: dict, stage_names: list[str], progress: Progress = no_progress) -> dict:
    """The rank-local (map) units of several stages for one rank, in order: the service's rank task.

    This works because a map unit reads only its own rank's artifacts (segment reads its rank's
    events, classify its rank's segments); everything cluster-wide happens in the reduce units.
    """
    results = {}
    for index, name in enumerate(stage_names):
        progress(name, index, len(stage_names), f"rank {rank['rank_id']}")
        if stage(name).map_rank is not None:  # run_rank_stage records the unit's seconds itself
            results[name] = _guard(name, rank["rank_id"], run_rank_stage, name, out_dir, rank, options)
    progress(stage_names[-1], len(stage_names), len(stage_names), f"rank {rank['rank_id']}")
    return results


def finish_root(out_dir: str, inputs: dict, options: dict, stage_names: list[str], rank_results: list[dict]) -> dict:
    """The reduce units of ``stage_names`` in order, then manifest.json: the service's root task.

    ``rank_results`` are the dicts ``run_rank_chain`` returned, one per rank.
    """
    out = Path(out_dir)
    root_inputs = RootInputs.from_dict(inputs)
    analyze_options = AnalyzeOptions.from_dict(options)
    timings = {}
    for name in stage_names:
        manifests = [r[name] for r in rank_results if name in r]
        map_seconds = max((m.get("seconds", 0.0) for m in manifests), default=0.0)
        started = time.perf_counter()
        _guard(name, None, run_root_stage, name, out_dir, inputs, options, manifests, map_seconds)
        timings[name] = round(map_seconds + time.perf_counter() - started, 4)
    not_built = [s.name for s in STAGES if not s.built]
    top = write_top_manifest(out, {}, root_inputs, analyze_options, list(stage_names), timings, not_built)
    return result_object(out, top)


def result_object(out: Path, top: dict) -> dict:
    """The one JSON object printed on success (later stages add their headline numbers here)."""
    normalize_manifest = out / schema.stage_manifest_name("normalize")
    counts = read_json(normalize_manifest) if normalize_manifest.exists() else {}
    extra: dict = {}
    segment_manifest = out / schema.stage_manifest_name("segment")
    if segment_manifest.exists():
        seg = read_json(segment_manifest)
        extra["segment"] = {
            "hard_error_count": seg["hard_error_count"],
            "interior_island_total": seg["interior_island_total"],
            "layers_per_pass_inventory": seg["layers_per_pass_inventory"],
            "layer_validation": {k: seg["layer_validation"][k] for k in ("status", "expected_layers", "expected_source", "pipeline_stages", "observed_total_layers")},
            "ranks": {str(r["rank_id"]): {"steps": r["step_count"], "complete_steps": r["complete_step_count"],
                                          "decoder_layers_observed": r["decoder_layers_observed"],
                                          "micro_batches_per_step": r["micro_batches_per_step"], "layer_confidence": r["layer_confidence"]}
                      for r in seg["rank_summaries"]},
        }
        warnings = []
        if seg["hard_error_count"] or seg["interior_island_total"]:
            warnings.append(f"segment: {seg['hard_error_count']} hard errors, {seg['interior_island_total']} rows in interior islands (see segment_manifest.json)")
        validation = seg["layer_validation"]
        if validation["status"] == "mismatch":
            warnings.append(f"segment: observed {validation['observed_total_layers']} decoder layers, the {validation['expected_source']} says {validation['expected_layers']}")
        if warnings:
            extra["warnings"] = warnings
    return {
        "status": "ok",
        "output_dir": str(out),
        "profile_root": top.get("profile_root"),
        "rank_count": counts.get("rank_count"),
        "event_count": counts.get("event_count"),
        "stages_executed": top["stages_executed"],
        "stage_timings": {k: top["stage_timings"][k] for k in top["stages_executed"]},
        "stages_not_built": top.get("stages_not_built", []),
        "notes": counts.get("notes", [])[:20],
        **extra,
    }
