"""Executing stages: the per-rank map unit, the per-root reduce unit, and the pool that maps ranks.

The units take and return only small, picklable values, so a process pool here and a Celery worker
run exactly the same code; each writes its own artifacts straight into the output dir, atomically,
and returns a small manifest dict. A stage's manifest is written last: it marks the stage complete.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable

from npuprof.pipeline import __version__, io
from npuprof.pipeline.errors import NoSpace, NpuprofError, StageFailed, no_space
from npuprof.pipeline.progress import Progress, no_progress
from npuprof.pipeline.sources.discovery import RankInput, RootInputs
from npuprof.pipeline.stages import stage
from npuprof.pipeline.stages.base import AnalyzeOptions, RankContext, RootContext, Stage, StageResult


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def clear_stage_outputs(out_dir: Path, current: Stage) -> None:
    """Un-mark a stage (manifest first, so a crash never leaves it looking complete), then drop its artifacts."""
    _remove(out_dir / current.manifest_name)
    for path in current.owned_paths:
        _remove(out_dir / path)


def write_result(out_dir: Path, current: Stage, result: StageResult, rank_id: int | None) -> None:
    """Write every part of a stage result atomically (the manifest is the caller's, written last);
    an artifact the stage does not declare is refused before anything is written."""
    current.check_declared(result)
    for table, data in result.tables.items():
        target = out_dir / (table.partition(rank_id) if rank_id is not None else table.path)
        io.write_parquet(target, table.conform(data))
    for view, frame in result.csv_views.items():
        io.write_csv(out_dir / view.file, frame)
    for name, payload in result.json_files.items():
        io.write_json(out_dir / name, payload)
    for name, payload in result.rendered.items():
        io.write_bytes(out_dir / name, payload)


def run_rank_stage(stage_name: str, out_dir: str, rank: dict, options: dict) -> dict:
    """Map unit: run ``stage_name`` for one rank, write its partitions, return its manifest entry."""
    current = stage(stage_name)
    ctx = RankContext(Path(out_dir), RankInput(**rank), AnalyzeOptions.from_dict(options))
    started = time.perf_counter()
    result = current.map_rank(ctx)
    write_result(Path(out_dir), current, result, rank_id=ctx.rank.rank_id)
    manifest = dict(result.manifest)
    manifest.setdefault("rank_id", ctx.rank.rank_id)
    manifest["seconds"] = round(time.perf_counter() - started, 4)
    return manifest


def run_root_stage(
    stage_name: str, out_dir: str, inputs: dict, options: dict, rank_manifests: list[dict], seconds: float = 0.0
) -> dict:
    """Reduce unit: run the cluster-level part of ``stage_name`` and write its manifest last."""
    current = stage(stage_name)
    out = Path(out_dir)
    started = time.perf_counter()
    manifest: dict = {}
    if current.reduce_root is not None:
        ctx = RootContext(out, RootInputs.from_dict(inputs), AnalyzeOptions.from_dict(options), rank_manifests)
        result = current.reduce_root(ctx)
        write_result(out, current, result, rank_id=None)
        manifest = dict(result.manifest)
    elif rank_manifests:
        manifest = {"ranks": rank_manifests}
    total = seconds + time.perf_counter() - started
    manifest = {
        "stage": stage_name,
        "npuprof_version": __version__,
        "completed_at": io.utc_now(),
        "seconds": round(total, 4),
        **manifest,
    }
    io.write_json(out / current.manifest_name, manifest)
    return manifest


def guard(stage_name: str, rank_id: int | None, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn``; turn any failure into a StageFailed that names the phase (stage and rank)."""
    phase = stage_name if rank_id is None else f"{stage_name} (rank {rank_id})"
    try:
        return fn(*args)
    except StageFailed:
        raise
    except NpuprofError as exc:
        raise StageFailed(phase, exc) from exc
    except OSError as exc:
        if not no_space(exc):
            raise StageFailed(phase, _internal(exc)) from exc
        raise StageFailed(phase, NoSpace("no space left on device while writing the output")) from None
    except Exception as exc:  # a bug: keep the traceback for failure.json, show one line
        raise StageFailed(phase, _internal(exc)) from exc


def _internal(exc: Exception) -> NpuprofError:
    """An unexpected error as an internal one (a bug), keeping its traceback for failure.json."""
    error = NpuprofError(f"internal error: {type(exc).__name__}: {exc}")
    error.traceback = traceback.format_exc()
    return error


POOL_MIN_BYTES = 16 * 1024 * 1024  # kernel sources below this run their rank units in-process


def _rank_weight(rank: RankInput) -> int:
    total = 0
    for path in (rank.kernel_csv, *rank.profiler_dbs, *rank.op_summary_csvs):
        if path:
            try:
                total += os.path.getsize(path)
            except OSError:
                pass
    return total


def _main_is_importable() -> bool:
    """Whether pool children can re-create ``__main__`` (not so for code read from stdin)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path is None or os.path.exists(path)


def _reraise(exc: BaseException) -> None:
    raise exc


def _uses_process_pool(inputs: RootInputs, jobs: int) -> bool:
    """Whether process-pool stages map this root's ranks in a pool (else in-process)."""
    if min(jobs, len(inputs.ranks)) < 2 or not _main_is_importable():
        return False  # e.g. `python - < script`: a process pool could not re-import __main__
    # starting a process pool costs more than a few MB of kernels take in-process
    return sum(_rank_weight(r) for r in inputs.ranks) >= POOL_MIN_BYTES


def _pool_context() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["npuprof.pipeline.runner"])
    return context


def warm_process_pool(inputs: RootInputs, jobs: int) -> None:
    """Start the fork server in the background (it imports the pipeline once, about a second) while
    normalize, which maps ranks on threads, reads the sources; the first pool then starts at once."""
    if _uses_process_pool(inputs, jobs):
        _pool_context()
        threading.Thread(target=multiprocessing.forkserver.ensure_running, daemon=True).start()


def map_ranks(
    current: Stage, out_dir: Path, inputs: RootInputs, options: AnalyzeOptions, jobs: int, progress: Progress
) -> list[dict]:
    """Run the map part of ``current`` over every rank, in a pool when it pays; the rank manifests."""
    ranks = sorted(inputs.ranks, key=_rank_weight, reverse=True)  # biggest first balances the pool
    total = len(ranks)
    progress(current.name, 0, total, "ranks")
    results: list[dict] = []
    workers = max(1, min(jobs, total))
    if not current.map_in_threads and not _uses_process_pool(inputs, jobs):
        workers = 1
    unit_args = [(current.name, str(out_dir), vars(rank), options.to_dict()) for rank in ranks]
    if workers == 1:
        for done, (rank, args) in enumerate(zip(ranks, unit_args), start=1):
            results.append(guard(current.name, rank.rank_id, run_rank_stage, *args))
            progress(current.name, done, total, f"rank {rank.rank_id}")
        return results
    if current.map_in_threads:
        pool_cm = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"npuprof-{current.name}")
    else:
        pool_cm = ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context())
    with pool_cm as pool:
        futures = {pool.submit(run_rank_stage, *args): rank.rank_id for rank, args in zip(ranks, unit_args)}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in finished:
                rank_id = futures[future]
                if future.exception() is not None:
                    for other in pending:
                        other.cancel()
                    guard(current.name, rank_id, _reraise, future.exception())
                results.append(future.result())
                progress(current.name, len(results), total, f"rank {rank_id}")
    return results


def run_rank_chain(
    out_dir: str, rank: dict, options: dict, stage_names: list[str], progress: Progress = no_progress
) -> dict:
    """The rank-local (map) units of several stages for one rank, in order: the service's rank task.

    This works because a map unit reads only its own rank's artifacts (segment reads its rank's
    events, classify its rank's segments); everything cluster-wide happens in the reduce units.
    """
    results = {}
    for index, name in enumerate(stage_names):
        progress(name, index, len(stage_names), f"rank {rank['rank_id']}")
        if stage(name).map_rank is not None:  # run_rank_stage records the unit's seconds itself
            results[name] = guard(name, rank["rank_id"], run_rank_stage, name, out_dir, rank, options)
    progress(stage_names[-1], len(stage_names), len(stage_names), f"rank {rank['rank_id']}")
    return results
