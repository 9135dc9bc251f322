"""Find the case roots under search roots, and name their output dirs."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from npuprof.pipeline.sources.discovery import (
    PROFILER_OUTPUT,
    holds_kernel_source,
    is_npuprof_output,
    names_one_rank,
    skip_dir,
)


def case_root(rank_dir: Path) -> Path:
    """The case root a rank dir belongs to (its parent when the name says it is one rank)."""
    return rank_dir.parent if names_one_rank(rank_dir.name) else rank_dir


def find_roots(search_roots: list[str | Path], limit: int | None = None) -> list[Path]:
    """Case roots under the search roots: dirs holding a kernel source (kernel_details.csv, a profiler
    db or op_summary csvs), rank dirs folded into their case root — unless that folder also holds a
    capture that is not a rank dir (a folder of unrelated captures: each is a root of its own, the
    folder none); our own output dirs, ``.bak`` dirs and PROF_* internals skipped."""
    roots: set[Path] = set()
    for search in search_roots:
        search = Path(search).resolve()
        found: list[Path] = []
        for current, dirnames, _files in os.walk(search):
            here = Path(current)
            dirnames[:] = sorted(
                d for d in dirnames if not skip_dir(d) and d != PROFILER_OUTPUT and not is_npuprof_output(here / d)
            )
            if holds_kernel_source(here):
                found.append(here)
                dirnames[:] = []
        # folders that hold a capture besides rank dirs: their rank dirs are not one case
        mixed = {here.parent for here in found if here != search and not names_one_rank(here.name)}
        roots.update(here if here == search or here.parent in mixed else case_root(here) for here in found)
    ordered = sorted(roots)
    return ordered[:limit] if limit else ordered


def root_slug(root: Path, search_roots: list[str | Path]) -> str:
    """A readable, unique output dir name: the path under its search root, plus a short hash."""
    root = Path(root).resolve()
    relative = root.name
    for search in search_roots:
        search = Path(search).resolve()
        if root == search or search in root.parents:
            relative = str(root.relative_to(search.parent))
            break
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", relative.replace(os.sep, "__")).strip("_")[:80]
    return f"{readable}-{hashlib.sha1(str(root).encode()).hexdigest()[:8]}"
