"""Executing stages: the per-rank map unit, the per-root reduce unit, and the pool that maps ranks.

The units take and return only small, picklable values, so a process pool here and a Celery worker
run exactly the same code; each writes its own artifacts straight into the output dir, atomically,
and returns a small manifest dict. A stage's manifest is written last: it marks the stage complete.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from npuprof.pipeline import __version__, io
from npuprof.pipeline.errors import BadInput, NoSpace, NpuprofError, StageFailed, no_space
from npuprof.pipeline.memory import check_rank_fits, rank_input_bytes, ranks_at_once
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.pools import stop_now, stopping_pool
from npuprof.pipeline.progress import Progress, no_progress
from npuprof.pipeline.sources.discovery import RankInput, RootInputs
from npuprof.pipeline.stages import stage
from npuprof.pipeline.stages.base import RankContext, RootContext, Stage, StageResult


def clear_stage_outputs(out_dir: Path, current: Stage) -> None:
    """Un-mark a stage (manifest first, so a crash never leaves it looking complete), then drop its artifacts."""
    io.remove(out_dir / current.manifest_name)
    for path in current.owned_paths:
        io.remove(out_dir / path)


def write_result(
    out_dir: Path,
    current: Stage,
    result: StageResult,
    rank_id: int | None,
    written: dict | None = None,
    rows_only: bool = False,
) -> None:
    """Write every part of a stage result atomically (the manifest is the caller's, written last);
    an artifact the stage does not declare is refused before anything is written. ``written`` collects
    each table as written, by path (a rank's next stages take it from there). ``rows_only``: a rank's
    table without rows gets its table's dir but no partition (``io.read_dataset`` reads it as empty)."""
    current.check_declared(result)
    for table, data in result.tables.items():
        target = out_dir / (table.partition(rank_id) if rank_id is not None else table.path)
        conformed = table.conform(data)
        if rows_only and rank_id is not None and conformed.num_rows == 0:
            (out_dir / table.path).mkdir(parents=True, exist_ok=True)
        else:
            io.write_parquet(target, conformed)
        if written is not None:
            written[table.path] = conformed
    if rows_only and rank_id is not None:  # every table the stage always writes exists once it ran
        for table in current.rank_tables():
            if table not in result.tables and table in current.produces:
                (out_dir / table.path).mkdir(parents=True, exist_ok=True)
    for view, frame in result.csv_views.items():
        io.write_csv(out_dir / view.file, frame)
    for name, payload in result.json_files.items():
        io.write_json(out_dir / name, payload)
    for name, payload in result.rendered.items():
        io.write_bytes(out_dir / name, payload)


def run_rank_stage(
    stage_name: str,
    out_dir: str,
    rank: dict,
    options: dict,
    handed_over: dict[str, Any] | None = None,
    derived: dict[str, Any] | None = None,
) -> dict:
    """Map unit: run ``stage_name`` for one rank, write its partitions, return its manifest entry.

    ``handed_over``: the rank's tables from its earlier stages in this process (see ``run_rank_chain``);
    this stage's tables are added to it. ``derived``: the chain's values computed from them."""
    current = stage(stage_name)
    held = {} if handed_over is None else handed_over  # not `or`: the chain's dict starts empty
    values = {} if derived is None else derived
    ctx = RankContext(Path(out_dir), RankInput(**rank), AnalyzeOptions.from_dict(options), held, values)
    started = time.perf_counter()
    # a rank without device events (communication files only) has rows in two or three of its ~24
    # tables: its empty partitions would be most of a 1,000-rank root's writes and of its reads after
    eventless = not ctx.rank.has_kernel_source()
    result = (current.map_eventless if eventless and current.map_eventless else current.map_rank)(ctx)
    write_result(Path(out_dir), current, result, ctx.rank.rank_id, handed_over, rows_only=eventless)
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
        del result, ctx
        # as a chain does after each stage: the next reduce, and a worker's next root, start low
        pa.default_memory_pool().release_unused()
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
    except (FileNotFoundError, NotADirectoryError) as exc:
        if exc.filename is None:
            raise StageFailed(phase, _internal(exc)) from exc
        # a file found at discovery and gone by the time a stage opens it (moved, deleted, a rank dir
        # swapped): the input changed under the run, not a bug
        vanished = BadInput(os.fsdecode(exc.filename), "vanished while npuprof read it (no such file)")
        raise StageFailed(phase, vanished) from None
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
# ... unless the ranks are this many: a chain costs ~10 ms even without events (communication files
# only), so a few hundred of them take seconds, which a second process halves
POOL_MIN_RANKS = 128


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
    many = len(inputs.ranks) >= POOL_MIN_RANKS
    return many or sum(rank_input_bytes(r) for r in inputs.ranks) >= POOL_MIN_BYTES


def map_rank_chains(
    out_dir: Path,
    inputs: RootInputs,
    options: AnalyzeOptions,
    stage_names: list[str],
    jobs: int,
    progress: Progress,
    in_pool: bool | None = None,
) -> list[dict]:
    """Every rank's chain of map units (``run_rank_chain``), in a process pool when it pays (``in_pool``
    None: by the kernel bytes), else in this process; one result per rank, rank by rank as they finish.
    The first failure cancels the chains not yet started and is raised with its phase."""
    ranks = sorted(inputs.ranks, key=rank_input_bytes, reverse=True)  # biggest first balances the pool
    total = len(ranks)
    pooled = _uses_process_pool(inputs, jobs) if in_pool is None else in_pool
    progress("ranks", 0, total, f"{' → '.join(stage_names)} per rank")
    workers = ranks_at_once([rank_input_bytes(r) for r in ranks], min(jobs, total)) if pooled else 1
    if pooled and workers < min(jobs, total):
        progress("ranks", 0, total, f"{workers} at once: the memory available holds no more")
    results: list[dict] = []
    if workers < 2:
        for rank in ranks:
            results.append(run_rank_chain(str(out_dir), vars(rank), options.to_dict(), stage_names, progress))
            progress("ranks", len(results), total, f"rank {rank.rank_id}")
        return results
    said = threading.Lock()  # pool feeders and this process's own chains finish and report side by side

    def report(stage_name: str, done: int, of: int, message: str) -> None:
        with said:
            progress(stage_name, done, of, message)

    def finished(rank: RankInput, result: dict) -> None:
        with said:
            results.append(result)
            progress("ranks", len(results), total, f"rank {rank.rank_id}")

    _chains_in_pool(out_dir, ranks, options.to_dict(), stage_names, workers, finished, report)
    return results


def _chains_in_pool(
    out_dir: Path,
    ranks: list[RankInput],
    options: dict,
    stage_names: list[str],
    workers: int,
    finished: Callable[[RankInput, dict], None],
    progress: Progress,
) -> None:
    """Every rank's chain, ``finished`` called as each ends: ``workers - 1`` pool processes take the
    ranks from the biggest, one feeder thread each, and this process works as the last one, from the
    smallest — one interpreter fewer than a pool of ``workers`` (its imports alone hold about 0.15×
    the bench root's input). ``progress`` hears this process's chains stage by stage, as an in-process
    run's. The first failure stops the handing out of ranks and is raised with its phase once the
    chains running end."""
    queue = deque(ranks)
    lock = threading.Lock()
    failures: list[BaseException] = []

    def take(biggest: bool) -> RankInput | None:
        with lock:
            if failures or not queue:
                return None
            return queue.popleft() if biggest else queue.pop()

    def fail(exc: BaseException) -> None:
        with lock:
            failures.append(exc)
            queue.clear()

    def feed(pool: ProcessPoolExecutor) -> None:
        while (rank := take(biggest=True)) is not None:
            try:
                result = pool.submit(run_rank_chain, str(out_dir), vars(rank), options, stage_names).result()
            except BaseException as exc:
                # a StageFailed names its stage and rank (guarded in the chain); anything else (a worker
                # killed) is named by the rank whose chain it ended
                fail(_named(rank.rank_id, exc))
                return
            finished(rank, result)

    with stopping_pool(workers - 1, preload=["npuprof.pipeline.runner"]) as pool:
        feeders = [threading.Thread(target=feed, args=(pool,), daemon=True) for _ in range(workers - 1)]
        for feeder in feeders:
            feeder.start()
        try:
            while (rank := take(biggest=False)) is not None:
                finished(rank, run_rank_chain(str(out_dir), vars(rank), options, stage_names, progress))
        except BaseException as exc:
            fail(exc)
            if not isinstance(exc, Exception):  # Ctrl-C, SIGTERM: the pool's chains stop now, not at their end
                stop_now(pool)
        for feeder in feeders:
            feeder.join()
    if failures:
        raise failures[0]


def _named(rank_id: int, exc: BaseException) -> BaseException:
    """``exc`` as the StageFailed that names the rank whose chain it ended (a StageFailed as it is)."""
    try:
        guard("rank chain", rank_id, _reraise, exc)
    except BaseException as named:
        return named
    return exc


def run_rank_chain(
    out_dir: str, rank: dict, options: dict, stage_names: list[str], progress: Progress = no_progress
) -> dict:
    """The rank-local (map) units of several stages for one rank, in order: the service's rank task.

    This works because a map unit reads only its own rank's artifacts (segment reads its rank's
    events, classify its rank's segments); everything cluster-wide happens in the reduce units. Each
    table is written once and handed to the rank's later stages in memory, never read back.
    """
    _system_allocator()
    results = {}
    handed_over: dict[str, Any] = {}
    derived: dict[str, Any] = {}
    # a rank the machine cannot hold is refused by name before it starts, not killed mid-stage
    guard(stage_names[0], rank["rank_id"], check_rank_fits, RankInput(**rank))
    for index, name in enumerate(stage_names):
        progress(name, index, len(stage_names), f"rank {rank['rank_id']}")
        _keep_what_is_read(handed_over, derived, [stage(later) for later in stage_names[index:]])
        if stage(name).map_rank is not None:  # run_rank_stage records the unit's seconds itself
            unit = (name, out_dir, rank, options, handed_over, derived)
            results[name] = guard(name, rank["rank_id"], run_rank_stage, *unit)
            # Arrow's allocator keeps what a stage freed; hand it back so the next stage starts low
            pa.default_memory_pool().release_unused()
    progress(stage_names[-1], len(stage_names), len(stage_names), f"rank {rank['rank_id']}")
    # the last stage's tables and what it was handed are freed only now: hand their pages back too,
    # or the process that runs the next chain starts it holding this one's peak
    handed_over.clear()
    derived.clear()
    pa.default_memory_pool().release_unused()
    return results


def _system_allocator() -> None:
    """Arrow allocates from the C library's malloc in this process from now on, not from mimalloc
    (pyarrow's default): measured on a rank of 1 M events, its chain peaks 15 % lower (1.10 against
    1.31 GB) in the same time, its freed pages going back as each stage ends (``release_unused``)."""
    if pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())


def _keep_what_is_read(handed_over: dict[str, Any], derived: dict[str, Any], later_stages: list[Stage]) -> None:
    """Drop from ``handed_over`` the tables and columns none of ``later_stages`` reads (the rank's
    working set: the events' unread columns are about a quarter of them, the idle windows and their
    evidence rows as much again by the last stage), and from ``derived`` the values none uses."""
    used = {value for later in later_stages for value in later.map_uses}
    for value in [value for value in derived if value not in used]:
        del derived[value]
    reads: dict[str, set[str] | None] = {}
    for read in (read for later in later_stages for read in later.map_reads):
        known = reads.get(read.table.path, set())
        reads[read.table.path] = None if known is None or read.columns is None else known | set(read.columns)
    for path in list(handed_over):
        if path not in reads:
            del handed_over[path]
        elif (columns := reads[path]) is not None:
            held = handed_over[path]
            handed_over[path] = held.select([c for c in held.column_names if c in columns])
