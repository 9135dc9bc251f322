"""The storage a worker serves: every path a task message names must lie under it.

A task message is untrusted: anyone who can write to the broker can publish one by hand. So before a
task reads, writes, moves or removes anything, each path it names (search roots, the archive, a root's
work and output dirs, a rank's files) is resolved — links and ``..`` followed — and must lie under one
of the worker's storage dirs (``settings.served_storage``); else the task fails with ``OutsideStorage``
and has touched nothing. The work-dir marker (``recovery.check_work_dir``) then narrows what a reduce
may move or replace to what a plan made.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from npuprof.pipeline.errors import UsageError
from npuprof.pipeline.input_files import lies_under
from npuprof.pipeline.schema.artifacts import TOP_MANIFEST
from npuprof.pipeline.sources.discovery import RankInput
from npuprof.workers import settings

NO_STORAGE_HINT = "start it with npuprof worker --storage DIR (repeatable) or NPUPROF_STORAGE_MAP=name=/mount"


class OutsideStorage(UsageError):
    """A task names a path outside the storage this worker serves: it is refused, nothing touched."""


def require_served(paths: Iterable[str | Path | None], what: str) -> None:
    """Raise OutsideStorage unless every path (None skipped) is absolute and, resolved, under a served dir."""
    served = settings.served_storage()
    if not served:
        raise OutsideStorage(f"refused {what}: this worker serves no storage ({NO_STORAGE_HINT})")
    for path in paths:
        if path is None:
            continue
        text = str(path)
        if not os.path.isabs(text) or "\x00" in text:
            raise OutsideStorage(f"refused {what}: {text!r} is not an absolute path")
        resolved = Path(os.path.realpath(text))
        if not lies_under(resolved, served):
            dirs = ", ".join(str(base) for base in served)
            raise OutsideStorage(f"refused {what}: {text} is outside the storage this worker serves ({dirs})")


def require_output_dir(out_dir: str, what: str) -> None:
    """Raise OutsideStorage unless ``out_dir`` (already checked to be served) is an npuprof output dir: it
    holds a ``manifest.json`` of its own (a file, not a link). Re-running stages writes there, a failure
    its failure.json: not into any dir of the storage a message names."""
    try:
        mode = (Path(out_dir) / TOP_MANIFEST).lstat().st_mode
    except OSError:
        mode = 0
    if not stat.S_ISREG(mode):
        raise OutsideStorage(f"refused {what}: {out_dir} is not an npuprof output dir (it holds no {TOP_MANIFEST})")


def options_paths(options: dict) -> list[str | None]:
    """The files a task's analyze options name (``--model-config``, ``--hardware-profile``): the worker
    reads them, and what they hold reaches the archive, so they too must lie in the served storage."""
    if not isinstance(options, dict):
        raise OutsideStorage("refused a task: its options are not an object")
    paths = [options.get("model_config"), options.get("hardware_profile")]
    if any(path is not None and not isinstance(path, str) for path in paths):
        raise OutsideStorage("refused a task: an option that names a file is not a path")
    return paths


def rank_paths(rank: dict) -> list[str]:
    """Every path a rank task's message names: the rank dir and each file (``RankInput.input_files``)."""
    if not isinstance(rank, dict):
        raise OutsideStorage("refused a rank task: its rank is not an object")
    if rank.get("rank_dir") is None:
        raise OutsideStorage("refused a rank task: its rank names no rank_dir")
    try:
        parsed = RankInput(**rank)
    except TypeError:
        raise OutsideStorage("refused a rank task: its rank has unknown or missing fields") from None
    return [parsed.rank_dir, *parsed.input_files()]


def inputs_paths(inputs: dict) -> list[str | None]:
    """Every path a root's discovered inputs name: the root, its manifest and each rank's files."""
    if not isinstance(inputs, dict) or not isinstance(inputs.get("ranks"), list):
        raise OutsideStorage("refused a reduce task: its inputs name no ranks")
    paths = [inputs.get("root"), inputs.get("requested_path"), inputs.get("collection_manifest")]
    return paths + [path for rank in inputs["ranks"] for path in rank_paths(rank)]


def require_sweep_record(record: dict) -> None:
    """Raise OutsideStorage unless a sweep's record (read back from Redis, which anyone who reaches it can
    write) keeps every root inside its archive: the archive served, each root's slug one plain name (no
    separator, not ``.`` or ``..``), its output and work dirs the ones a plan makes there."""
    require_served([record.get("archive")], "the sweep's merge")
    archive = Path(os.path.realpath(str(record["archive"])))
    for entry in record.get("roots", []):
        slug = entry.get("slug") if isinstance(entry, dict) else None
        if not isinstance(slug, str) or slug in ("", ".", "..") or "/" in slug or "\x00" in slug:
            raise OutsideStorage(f"refused the sweep's merge: its record names a root dir {slug!r} outside {archive}")
        planned = {"final_dir": archive / slug, "work_dir": archive / f".{slug}.work-{entry.get('key')}"}
        for field, path in planned.items():
            if field in entry and Path(os.path.realpath(str(entry[field]))) != path:
                raise OutsideStorage(f"refused the sweep's merge: its record puts {slug}'s {field} at {entry[field]}")
