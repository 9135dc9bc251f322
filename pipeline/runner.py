"""The stage runner: ``analyze()`` is the one entry point the CLI, ``npuprof demo``, the local sweep
and the service share.

It prepares the output dir, resolves the stage stage_range (``stage_range``), maps rank-local stages over
ranks and reduces once per root (``execution``), and writes manifest.json and the result object
(``manifests``). On failure it leaves failure.json and no artifact of the failed stage.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import (
    BadInput,
    NpuprofError,
    StageFailed,
    UsageError,
    failure_object,
    full_disk,
    naming_full_disk,
    no_space,
    traceback_of,
)
from npuprof.pipeline.execution import clear_stage_outputs, guard, map_rank_chains, run_root_stage
from npuprof.pipeline.manifests import result_object, write_top_manifest
from npuprof.pipeline.modelinfo.hardware import check_hardware_model
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.progress import Progress, no_progress
from npuprof.pipeline.read_cache import cached_reads
from npuprof.pipeline.sources.discovery import RootInputs, discover, is_rank_dir
from npuprof.pipeline.stage_range import StageRange, check_prerequisites, resolve_stage_range
from npuprof.pipeline.stages import STAGES
from npuprof.pipeline.stages.base import Stage
from npuprof.pipeline.stages.segment.expected import expected_model

__all__ = ["StageRange", "analyze", "finish_root", "write_failure"]


def check_output_location(out_dir: Path, root: str | Path | None) -> None:
    """Refuse an output dir that would write into the user's capture: the profiling root itself, a
    dir inside one of its rank dirs, or a dir that contains the root."""
    out = out_dir.resolve()
    for parent in (out, *out.parents):
        if is_rank_dir(parent):
            raise UsageError(f"output dir {out_dir} is inside the rank dir {parent}: write the analysis elsewhere")
    if root is None or not Path(root).exists():
        return
    source = Path(root).resolve()
    if out == source:
        raise UsageError(f"output dir {out_dir} is the profiling root itself: write the analysis elsewhere")
    if out in source.parents:
        raise UsageError(f"output dir {out_dir} contains the profiling root {root}: write the analysis elsewhere")


def _foreign_entries(out_dir: Path) -> list[str]:
    """Entries of ``out_dir`` that npuprof did not write (never removed, not even with --overwrite)."""
    ours = {schema.TOP_MANIFEST, schema.FAILURE_JSON, schema.ROLLUP_ROW_CACHE, schema.REPORT_DIR, schema.RUN_LOCK}
    for registered in STAGES:
        ours.add(registered.manifest_name)
        ours.update(registered.owned_paths)
    foreign = [p.name for p in out_dir.iterdir() if p.name not in ours and not p.name.endswith(".tmp")]
    top = out_dir / schema.TOP_MANIFEST
    if top.is_file():
        try:
            written_by_us = "npuprof_version" in io.read_json(top)
        except (BadInput, TypeError):
            written_by_us = False
        if not written_by_us:
            foreign.append(schema.TOP_MANIFEST)
    return sorted(foreign)


def prepare_output_dir(out_dir: Path, stage_range: StageRange, overwrite: bool) -> None:
    """Refuse a non-empty output dir unless asked to overwrite npuprof's own outputs in it or to
    resume a stage stage_range; --overwrite never removes a file npuprof did not write."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"output path {out_dir} exists and is not a directory")
    # a dir holding only npuprof's failure document (a run that failed at once: a typo in the root)
    # is reused as it is: the corrected rerun needs no --overwrite
    leftovers = (schema.RUN_LOCK, schema.FAILURE_JSON)
    entries = [p for p in out_dir.iterdir() if p.name not in leftovers] if out_dir.is_dir() else []
    if entries:
        if overwrite:
            foreign = _foreign_entries(out_dir)
            if foreign:
                raise UsageError(
                    f"output dir {out_dir} holds files npuprof did not write ({', '.join(foreign[:5])}); "
                    "--overwrite replaces only npuprof's own outputs: choose another dir"
                )
            for registered in STAGES:
                clear_stage_outputs(out_dir, registered)
            (out_dir / schema.TOP_MANIFEST).unlink(missing_ok=True)
        elif not stage_range.resumes:
            raise UsageError(
                f"output dir {out_dir} is not empty; pass --overwrite to replace it, "
                "or --from-stage / --only-stage to resume"
            )
    (out_dir / schema.FAILURE_JSON).unlink(missing_ok=True)


def make_output_dir(out_dir: Path) -> None:
    """Create the output dir (and its parents), or say in one line why it cannot be."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output dir {out_dir}: {exc.strerror or exc}") from None


def run_lock_holder(out_dir: Path) -> str | None:
    """Who holds ``out_dir``'s run lock (``pid N``), or None when no run holds it; takes nothing."""
    try:
        handle = open(out_dir / schema.RUN_LOCK)
    except FileNotFoundError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return handle.read().strip() or "another process"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


@contextmanager
def run_lock(out_dir: Path) -> Iterator[None]:
    """Hold the output dir for one run: a second run into the same dir is refused, not interleaved.

    An advisory ``flock`` on ``OUT/.npuprof.lock``: the kernel releases it when the process ends,
    so a killed run never holds the dir; the file is removed when the run ends (one a killed run
    leaves is taken over by the next, as nobody holds its lock).
    """
    path = out_dir / schema.RUN_LOCK
    handle = open(path, "a+")
    held = False
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise UsageError(f"output dir {out_dir} is being written by another npuprof run ({holder})") from None
        held = True
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        yield
    finally:
        if held:
            path.unlink(missing_ok=True)  # while still holding it: no other run sees it half-released
        handle.close()


def load_inputs(out_dir: Path) -> RootInputs:
    """The discovered inputs recorded by an earlier normalize run (for later stage ranges)."""
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
    stage_range: StageRange = StageRange(),
    jobs: int | None = None,
    overwrite: bool = False,
    progress: Progress = no_progress,
) -> dict:
    """Analyze one profiling root into ``out_dir``; returns the result object the CLI prints.

    Raises ``StageFailed`` (with the phase) or another ``NpuprofError``; in both cases a
    ``failure.json`` is left in ``out_dir`` when the dir could be prepared.
    """
    out = Path(out_dir)
    stages = resolve_stage_range(stage_range)
    check_output_location(out, root)
    check_before_writing(root, options, stages)
    make_output_dir(out)
    with run_lock(out):
        prepare_output_dir(out, stage_range, overwrite)
        try:
            return _analyze(root, out, stages, options, stage_range, jobs or os.cpu_count() or 1, progress)
        except OSError as exc:  # outside a stage (manifests, the lock): only a full disk is expected here
            if not no_space(exc):
                raise
            failure = full_disk(out)
            write_failure_if_room(out, failure)
            raise failure from None
        except StageFailed as exc:
            exc = naming_full_disk(exc, out)  # name the output dir the stage could not write
            write_failure_if_room(out, exc)
            raise exc from None
        except NpuprofError as exc:
            write_failure_if_room(out, exc)
            raise


def write_failure_if_room(out: Path, exc: NpuprofError) -> bool:
    """Write failure.json for ``exc`` into ``out``; False when the disk is too full to hold even that
    (the error still reaches the caller)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_failure(out, exc)
        return True
    except OSError as error:
        if not no_space(error):
            raise
        return False


def check_before_writing(root: str | Path | None, options: AnalyzeOptions, stages: list[Stage]) -> None:
    """What can be refused without reading the capture is refused before OUT is created: a root that does
    not exist, an unknown --model-id or --hardware-model, a --model-config that is not a readable config
    (a typo must not leave an output dir behind that the corrected run then refuses)."""
    if root is not None and stages[0].name == "normalize" and not Path(root).exists():
        raise UsageError(f"{root}: no such file or directory (the profiling root to analyze)")
    check_hardware_model(options.hardware_model)
    if options.model_id or options.model_config:
        expected_model(options.model_config, options.model_id, str(root) if root is not None else ".")


def _analyze(
    root: str | Path | None,
    out: Path,
    stages: list[Stage],
    options: AnalyzeOptions,
    stage_range: StageRange,
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
    top = io.read_json_or_empty(out / schema.TOP_MANIFEST) if stage_range.resumes else {}
    names = [current.name for current in stages]
    for current in stages:
        clear_stage_outputs(out, current)
    try:
        mapped = [current.name for current in stages if current.map_rank is not None]
        # a range of root-level stages (cross_rank … report) starts no rank chain, and no pool
        rank_results = map_rank_chains(out, inputs, options, mapped, jobs, progress) if mapped else []
        return finish_root(str(out), inputs.to_dict(), options.to_dict(), names, rank_results, top, progress)
    except NpuprofError:
        for current in stages:  # a stage without its manifest is unfinished: none of it may look complete
            if not (out / current.manifest_name).exists():
                clear_stage_outputs(out, current)
        raise


def finish_root(
    out_dir: str,
    inputs: dict,
    options: dict,
    stage_names: list[str],
    rank_results: list[dict],
    top: dict | None = None,
    progress: Progress = no_progress,
) -> dict:
    """The reduce units of ``stage_names`` in order, then manifest.json (``top``: the one a resumed run
    extends); after every rank's ``execution.run_rank_chain`` — in a local pool or as the service's root
    task. A stage's time is its slowest rank's map unit plus its reduce."""
    out = Path(out_dir)
    timings = dict((top or {}).get("stage_timings", {}))
    with cached_reads():  # the reduces read the small per-rank tables again and again: once from disk
        for name in stage_names:
            progress(name, 0, 1, "root")
            manifests = [r[name] for r in rank_results if name in r]
            map_seconds = max((m.get("seconds", 0.0) for m in manifests), default=0.0)
            started = time.perf_counter()
            guard(name, None, run_root_stage, name, out_dir, inputs, options, manifests, map_seconds)
            timings[name] = round(map_seconds + time.perf_counter() - started, 4)
            progress(name, 1, 1, "root")
    top = write_top_manifest(
        out,
        top or {},
        RootInputs.from_dict(inputs),
        AnalyzeOptions.from_dict(options),
        list(stage_names),
        timings,
    )
    return result_object(out, top)
