"""The embedded sweep: every root analyzed in a local process pool, then one merged rollup."""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import as_completed
from pathlib import Path

from npuprof.pipeline import __version__, io, schema
from npuprof.pipeline.errors import NoSpace, NpuprofError, no_space
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.pools import is_running, stop_now, stopping_pool
from npuprof.pipeline.progress import Progress, no_progress
from npuprof.pipeline.runner import analyze, run_lock, write_failure_if_room
from npuprof.pipeline.sweep.rollup import merge_sweep, root_rollup, root_status
from npuprof.pipeline.sweep.roots import find_roots, root_slug
from npuprof.pipeline.sweep.service_mark import refuse_if_marked


def is_reusable(out_dir: Path, options: AnalyzeOptions) -> bool:
    """A finished output of this npuprof version with the same options (so it can be reused)."""
    if root_status(out_dir) != "ok":
        return False
    top = io.read_json(out_dir / schema.TOP_MANIFEST)
    return top.get("npuprof_version") == __version__ and top.get("options") == options.to_dict()


def analyze_into(root: str, final_dir: str, options: dict) -> dict:
    """Analyze one root into a temp dir beside ``final_dir`` and rename it into place (atomic).

    A failed root still lands, with its failure.json and no manifest.json, so the archive says why.
    Returns a small dict (status, error); never raises for bad data.
    """
    final = Path(final_dir)
    work = final.with_name(f".{final.name}.work-{os.getpid()}")
    io.remove(work)  # a link planted at a name one can guess is removed, never written through
    work.mkdir()  # exclusively: a link planted since is refused, not followed
    started = time.perf_counter()
    try:
        analyze(root, work, options=AnalyzeOptions.from_dict(options), jobs=1)
        result = {"status": "ok"}
    except NpuprofError as exc:
        result = {"status": "failed", "error": exc.one_line(), "exit_code": exc.exit_code}
        if io.read_failure(work) is None and not write_failure_if_room(work, exc):  # full: land nothing
            shutil.rmtree(work, ignore_errors=True)
            return {**result, "root": root, "output_dir": None, "landed": False}
    try:
        io.move_dir_into_place(work, final)
        root_rollup(root, final.name, final)  # cache the rollup row while still in the pool
    except OSError as exc:
        if not no_space(exc):
            raise
    result.update({"root": root, "output_dir": str(final), "seconds": round(time.perf_counter() - started, 3)})
    return result


def _remove_work_dirs(archive: Path, pids: list[int]) -> None:
    """Remove the work dirs the pool processes ``pids`` left in ``archive`` (``analyze_into``'s)."""
    for pid in pids:
        for work in archive.glob(f".*.work-{pid}"):
            shutil.rmtree(work, ignore_errors=True)


def _stale_work_pids(archive: Path) -> list[int]:
    """Pids of local work dirs in ``archive`` whose process is gone (a sweep killed with -9 left them;
    the run lock, held by the caller, says no other local sweep writes here, and service work dirs end
    in a key, not a pid)."""
    pids = {work.name.rsplit("-", 1)[1] for work in archive.glob(".*.work-*")}
    return [int(pid) for pid in pids if pid.isdigit() and not is_running(int(pid))]


def run_sweep(
    search_roots: list[str],
    out: str | Path,
    *,
    options: AnalyzeOptions = AnalyzeOptions(),
    jobs: int | None = None,
    reuse_existing: bool = False,
    limit: int | None = None,
    series_key: str | None = None,
    progress: Progress = no_progress,
) -> dict:
    """Analyze every root under ``search_roots`` into ``out/<slug>/`` and merge the rollup;
    ``series_key`` (a regular expression on root paths) orders the roots of a series for trends."""
    archive = Path(out)
    archive.mkdir(parents=True, exist_ok=True)
    with run_lock(archive):  # a second sweep into this archive is refused, never interleaved
        refuse_if_marked(archive)  # ... and so is a service sweep's
        return _sweep(search_roots, archive, options, jobs, reuse_existing, limit, series_key, progress)


def _sweep(
    search_roots: list[str],
    archive: Path,
    options: AnalyzeOptions,
    jobs: int | None,
    reuse_existing: bool,
    limit: int | None,
    series_key: str | None,
    progress: Progress,
) -> dict:
    started = time.perf_counter()
    _remove_work_dirs(archive, _stale_work_pids(archive))
    roots = find_roots(search_roots, limit)
    plan = [(str(root), root_slug(root, search_roots)) for root in roots]
    todo = [(root, slug) for root, slug in plan if not (reuse_existing and is_reusable(archive / slug, options))]
    progress("sweep", 0, len(plan), f"{len(plan)} roots, {len(plan) - len(todo)} reused")
    done = len(plan) - len(todo)
    not_written: list[dict] = []  # roots a full disk kept out of the archive, with why
    if todo:
        workers = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
        with stopping_pool(workers) as pool:
            futures = {
                pool.submit(analyze_into, root, str(archive / slug), options.to_dict()): root for root, slug in todo
            }
            try:
                for future in as_completed(futures):
                    result = future.result()
                    if not result.get("landed", True):
                        not_written.append({"root": result["root"], "error": result["error"]})
                    done += 1
                    progress("sweep", done, len(plan), f"{result['status']}: {Path(futures[future]).name}")
            except BaseException:  # Ctrl-C, SIGTERM: no root starts, the running ones stop, nothing half-made stays
                _remove_work_dirs(archive, stop_now(pool))
                raise
    meta = {
        "search_roots": [str(s) for s in search_roots],
        "options": options.to_dict(),
        "npuprof_version": __version__,
        "reused_roots": len(plan) - len(todo),
        "wall_seconds": round(time.perf_counter() - started, 3),
        "mode": "local",
        "roots_not_written": not_written,
        "series_key": series_key,
    }
    progress("merge", 0, 1, f"merging {len(plan)} roots: cohorts, outliers, fleet, trends")
    try:
        merged = merge_sweep(archive, plan, meta)
        progress("merge", 1, 1, f"merged {len(plan)} roots")
        return merged
    except OSError as exc:
        if not no_space(exc):
            raise
        raise NoSpace(f"no space left on device writing the rollup into {archive}") from None
