"""Find the case roots under search roots, and name their output dirs."""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from npuprof.pipeline.sources.discovery import KERNEL_DETAILS, PROFILER_OUTPUT, _is_npuprof_output, _PROFILER_DB, _skip_dir

# A rank dir's name says it is one rank of a larger case: fold it into its parent.
_RANK_DIR = re.compile(r"(^|_)rank[_-]?\d+|dp\d+_pp\d+_tp\d+|_ascend_pt$|^device[_-]?\d+$", re.IGNORECASE)


def _holds_kernels(path: Path) -> bool:
    for directory in (path / PROFILER_OUTPUT, path):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        if KERNEL_DETAILS in names or any(_PROFILER_DB.match(n) for n in names):
            return True
    return False


def case_root(rank_dir: Path) -> Path:
    """The case root a rank dir belongs to (its parent when the name says it is one rank)."""
    return rank_dir.parent if _RANK_DIR.search(rank_dir.name) else rank_dir


def find_roots(search_roots: list[str | Path], limit: int | None = None) -> list[Path]:
    """Case roots under the search roots: dirs holding kernel_details.csv or a profiler db, rank dirs
    folded into their case root; our own output dirs, ``.bak`` dirs and PROF_* internals skipped."""
    roots: set[Path] = set()
    for search in search_roots:
        search = Path(search).resolve()
        for current, dirnames, _files in os.walk(search):
            here = Path(current)
            dirnames[:] = sorted(d for d in dirnames if not _skip_dir(d) and d != PROFILER_OUTPUT and not _is_npuprof_output(here / d))
            if _holds_kernels(here):
                roots.add(case_root(here) if here != search else here)
                dirnames[:] = []
    ordered = sorted(roots)
    # a case root found both as itself and as the parent of its rank dirs is one root
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
