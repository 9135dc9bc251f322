"""Find the ranks of a profiling root and the files each rank holds.

Accepted inputs: a cluster root (one dir per rank, at any depth), one rank dir, an
``ASCEND_PROFILER_OUTPUT`` dir, or a collection ``manifest.json`` whose ``analysis_status`` must be
``ok``. Rank ids come from, in order: the ``profiler_info_<N>.json`` file name, that file's
``rank_id``, the ``ascend_pytorch_profiler_<N>.db`` file name, the dir name (``rank_N``, ``rankN``,
``…_rankN``, ``dpX_ppY_tpZ`` with the parallel sizes from profiler_metadata.json), then the ordinal
of the dir. Two dirs with one rank id are an error that names both.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

from npuprof.pipeline import schema
from npuprof.pipeline.errors import BadInput, ManifestNotOk
from npuprof.pipeline.input_files import file_kind, read_input_json
from npuprof.pipeline.sources.integrity import file_state

PROFILER_OUTPUT = "ASCEND_PROFILER_OUTPUT"
COLLECTION_MANIFEST = "manifest.json"  # written by the capture's collection tooling (an input)
KERNEL_DETAILS = "kernel_details.csv"
MAX_RANK_ID = 2**31 - 1  # rank ids are int32 in every table

_PROFILER_INFO = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
_PROFILER_DB = re.compile(r"^(?:ascend_pytorch_profiler(?:_(\d+))?|msprof(?:_\d+)*)\.db$")
_OP_SUMMARY = re.compile(r"^op_summary(?:_[0-9A-Za-z]+)*\.csv$")
# The one grammar of rank dir names: rank ids in them, and names that say "one rank of a case".
_RANK_IN_NAME = (
    re.compile(r"(?:^|[_-])rank[_-]?(\d+)(?:$|[_-])", re.IGNORECASE),
    re.compile(r"rank[_-]?(\d+)", re.IGNORECASE),
)
_DP_PP_TP = re.compile(r"dp(\d+)_pp(\d+)_tp(\d+)", re.IGNORECASE)
_ONE_RANK_SUFFIX = re.compile(r"_ascend_pt$|^device[_-]?\d+$", re.IGNORECASE)
_PROF_EXPORT_OP_SUMMARY = "PROF_*/mindstudio_profiler_output/op_summary*.csv"
_SKIP_DIR_NAMES = {"__pycache__", "cluster_analysis_output", "FRAMEWORK", "mindstudio_profiler_log"}

TRACE_VIEW = "trace_view_json"  # the supplemental source kind of trace_view.json
# Registered per rank for later stages (paths only; normalize reads only trace_view.json's frequency counters).
SUPPLEMENTAL = {
    TRACE_VIEW: "trace_view.json",
    "communication_json": "communication.json",
    "communication_matrix_json": "communication_matrix.json",
    "step_trace_time_csv": "step_trace_time.csv",
    "analysis_db": "analysis.db",
}


@dataclass
class RankInput:
    """Everything discovery knows about one rank: its id, why, and its files."""

    rank_id: int
    rank_dir: str
    rank_id_from: str
    kernel_csv: str | None = None
    op_summary_csvs: list[str] = field(default_factory=list)
    profiler_dbs: list[str] = field(default_factory=list)
    profiler_info: str | None = None
    profiler_metadata: str | None = None
    supplemental: dict[str, str] = field(default_factory=dict)
    # [size, mtime_ns] of each kernel source when discovered: normalize refuses a file that changed
    source_states: dict[str, list[int]] = field(default_factory=dict)

    def input_files(self) -> list[str]:
        """Every file of this rank that npuprof reads or registers."""
        files = [self.kernel_csv, *self.op_summary_csvs, *self.profiler_dbs, self.profiler_info, self.profiler_metadata]
        return [f for f in files if f] + list(self.supplemental.values())

    def has_kernel_source(self) -> bool:
        return bool(self.kernel_csv or self.op_summary_csvs or self.profiler_dbs)


@dataclass
class RootInputs:
    """The discovered layout of one profiling root."""

    requested_path: str
    root: str
    ranks: list[RankInput]
    collection_manifest: str | None = None
    symlinks_not_followed: list[str] = field(default_factory=list)  # dirs below the root that are links

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RootInputs":
        ranks = [RankInput(**r) for r in data["ranks"]]
        links = data.get("symlinks_not_followed", [])
        return cls(data["requested_path"], data["root"], ranks, data.get("collection_manifest"), links)


def _resolve_collection_manifest(path: Path) -> tuple[Path, Path]:
    """(profile root, manifest path) of a collection manifest whose analysis_status is ok."""
    data = read_input_json(path)
    if not isinstance(data, dict) or "analysis_status" not in data:
        raise BadInput(path, "not a collection manifest (no analysis_status)")
    if data["analysis_status"] != "ok":
        raise ManifestNotOk(path, data["analysis_status"])
    for key in ("profile_root", "remote_profile_root"):
        value = data.get(key)
        if isinstance(value, str) and value:
            candidate = Path(value)
            if not candidate.is_absolute():
                candidate = path.parent / candidate
            if candidate.exists():
                return candidate, path
    raise BadInput(path, "neither profile_root nor remote_profile_root names an existing directory")


def _is_collection_manifest(path: Path) -> bool:
    """A collection manifest.json (it has ``analysis_status``). One that cannot be read is refused
    with exit 4: its ``analysis_status`` gate cannot be checked, so it must not be bypassed."""
    if path.name != COLLECTION_MANIFEST or not os.path.lexists(path):
        return False
    try:
        data = read_input_json(path)
    except BadInput as exc:
        raise ManifestNotOk(path, None, reason=f"{exc.reason}; cannot check its analysis_status") from None
    return isinstance(data, dict) and "analysis_status" in data


def is_npuprof_output(path: Path) -> bool:
    """An output dir of npuprof (never profiling data to analyze)."""
    return (
        (path / schema.stage_manifest_name("normalize")).exists()
        or (path / schema.NORMALIZED_EVENTS).is_dir()
        or ((path / schema.TOP_MANIFEST).is_file() and (path / schema.CAPTURE_INFO).exists())
    )


def _is_kernel_file(name: str) -> bool:
    return name == KERNEL_DETAILS or bool(_PROFILER_DB.match(name)) or bool(_OP_SUMMARY.match(name))


def _direct_kernel_files(path: Path) -> bool:
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(_is_kernel_file(n) for n in names)


def holds_kernel_source(path: Path) -> bool:
    """``path`` holds a kernel source that normalize reads: kernel_details.csv, a profiler db or an
    op_summary csv, directly, in its ASCEND_PROFILER_OUTPUT, or in a PROF_*/ msprof export."""
    path = Path(path)
    if _direct_kernel_files(path) or _direct_kernel_files(path / PROFILER_OUTPUT):
        return True
    return any(_OP_SUMMARY.match(p.name) for p in path.glob(_PROF_EXPORT_OP_SUMMARY))


def names_one_rank(name: str) -> bool:
    """The dir name says it is one rank of a larger case (``rank_3``, ``dp0_pp1_tp0``, ``*_ascend_pt``)."""
    return (
        any(p.search(name) for p in _RANK_IN_NAME)
        or bool(_DP_PP_TP.search(name))
        or bool(_ONE_RANK_SUFFIX.search(name))
    )


def is_rank_dir(path: Path) -> bool:
    """A rank dir holds ASCEND_PROFILER_OUTPUT/, a profiler_info json, or kernel files directly."""
    if (path / PROFILER_OUTPUT).is_dir():
        return True
    try:
        names = os.listdir(path)
    except OSError:
        return False
    if any(_PROFILER_INFO.match(n) for n in names):
        return True
    return _direct_kernel_files(path)


def skip_dir(name: str) -> bool:
    """Dirs never searched for ranks: hidden, backups (``.bak``, ``bak_*``), PROF_* internals, logs."""
    lowered = name.lower()
    return (
        name in _SKIP_DIR_NAMES
        or name.startswith(".")
        or lowered.endswith(".bak")
        or lowered.startswith("bak_")
        or name.startswith("PROF_")
    )


def find_rank_dirs(root: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """(rank dirs under ``root`` at any depth, sorted by path; dirs passed over as backups or
    internals; symlinked dirs not followed, and links that lead nowhere). Never descends into a rank
    dir; a symlinked dir is a rank dir when it is one itself, and is never searched below (no loops):
    the caller names it."""
    if is_rank_dir(root):
        return [root], [], []
    found: list[Path] = []
    passed_over: list[Path] = []
    not_followed: list[Path] = []
    for current, dirnames, files in os.walk(root, followlinks=False):
        here = Path(current)
        # a link that loops or names nothing is listed among files: named too, never silently passed by
        not_followed += [here / f for f in files if os.path.islink(here / f) and not os.path.exists(here / f)]
        passed_over += [here / d for d in dirnames if skip_dir(d) and not d.startswith((".", "__"))]
        keep = []
        for name in sorted(d for d in dirnames if not skip_dir(d)):
            child = here / name
            if is_npuprof_output(child):
                continue
            if is_rank_dir(child):
                found.append(child)
            elif child.is_symlink():
                not_followed.append(child)
            else:
                keep.append(name)
        dirnames[:] = keep
    return sorted(found), sorted(passed_over), sorted(not_followed)


def regular_file(path: Path) -> Path:
    """``path`` if it is a regular file (symlinks followed); BadInput naming what it is otherwise.

    A FIFO would block every reader forever, a device never ends, a directory cannot be parsed:
    they are refused here, where files enter.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        what = "a broken or looping symlink" if os.path.islink(path) else (exc.strerror or str(exc))
        raise BadInput(path, f"cannot read file: {what}") from None
    if not stat.S_ISREG(mode):
        raise BadInput(path, f"not a regular file ({file_kind(mode)})")
    return path


def _files_of_rank(rank_dir: Path) -> dict:
    """Locate a rank's files: ASCEND_PROFILER_OUTPUT first, then the rank dir, then PROF_*/ exports."""
    out_dir = rank_dir / PROFILER_OUTPUT
    search = [d for d in (out_dir, rank_dir) if d.is_dir()]
    found: dict = {"kernel_csv": None, "profiler_dbs": [], "op_summary_csvs": [], "supplemental": {}}
    for directory in search:
        names = sorted(os.listdir(directory))
        if found["kernel_csv"] is None and KERNEL_DETAILS in names:
            found["kernel_csv"] = str(regular_file(directory / KERNEL_DETAILS))
        if not found["profiler_dbs"]:
            found["profiler_dbs"] = [str(regular_file(directory / n)) for n in names if _PROFILER_DB.match(n)]
        if not found["op_summary_csvs"]:
            found["op_summary_csvs"] = [str(regular_file(directory / n)) for n in names if _OP_SUMMARY.match(n)]
        for kind, filename in SUPPLEMENTAL.items():
            if kind not in found["supplemental"] and filename in names:
                found["supplemental"][kind] = str(regular_file(directory / filename))
    if not found["op_summary_csvs"]:
        exports = sorted(rank_dir.glob(_PROF_EXPORT_OP_SUMMARY))
        found["op_summary_csvs"] = [str(regular_file(p)) for p in exports if _OP_SUMMARY.match(p.name)]
    return found


def _profiler_info_file(rank_dir: Path) -> tuple[Path | None, int | None]:
    """The rank's profiler_info json and the rank number in its file name, if any."""
    candidates = sorted(regular_file(p) for p in rank_dir.glob("profiler_info*.json") if _PROFILER_INFO.match(p.name))
    for path in candidates:
        number = _PROFILER_INFO.match(path.name).group(1)
        if number is not None:
            return path, int(number)
    return (candidates[0], None) if candidates else (None, None)


def _metadata_file(rank_dir: Path) -> Path | None:
    for candidate in (rank_dir / "profiler_metadata.json", rank_dir / "FRAMEWORK" / "profiler_metadata.json"):
        if os.path.lexists(candidate):
            return regular_file(candidate)
    return None


def _json_or_none(path: Path) -> object:
    try:
        return read_input_json(path, finite=True)
    except BadInput:
        return None


def _rank_from_dir_name(name: str, metadata_path: Path | None) -> int | None:
    for pattern in _RANK_IN_NAME:
        match = pattern.search(name)
        if match:
            return int(match.group(1))
    match = _DP_PP_TP.search(name)
    if match and metadata_path is not None:
        args = _json_or_none(metadata_path)
        sizes = args.get("distributed_args") if isinstance(args, dict) else None
        sizes = sizes if isinstance(sizes, dict) else {}
        tp_size, dp_size = sizes.get("tensor_model_parallel_size"), sizes.get("data_parallel_size")
        if isinstance(tp_size, int) and isinstance(dp_size, int):
            dp, pp, tp = (int(g) for g in match.groups())
            # Megatron order: tp varies fastest, then dp, then pp.
            return pp * dp_size * tp_size + dp * tp_size + tp
    return None


def _rank_identity(rank_dir: Path, ordinal: int, files: dict) -> tuple[int, str, Path | None, Path | None]:
    info_path, info_number = _profiler_info_file(rank_dir)
    metadata_path = _metadata_file(rank_dir)
    rank, source, evidence = _rank_number(rank_dir, ordinal, files, info_path, info_number, metadata_path)
    if not 0 <= rank <= MAX_RANK_ID:
        raise BadInput(evidence, f"rank id {rank} is out of range (0 to {MAX_RANK_ID})")
    return rank, source, info_path, metadata_path


def _rank_number(
    rank_dir: Path, ordinal: int, files: dict, info_path: Path | None, info_number: int | None, metadata: Path | None
) -> tuple[int, str, Path]:
    """(rank id, where it came from, the file or dir that says so)."""
    if info_number is not None:
        return info_number, "profiler_info_filename", info_path
    if info_path is not None:
        info = _json_or_none(info_path)  # unreadable: the rank id comes from elsewhere, normalize notes the file
        rank = info.get("rank_id") if isinstance(info, dict) else None
        if isinstance(rank, int) or (isinstance(rank, str) and rank.strip().lstrip("-").isdigit()):
            return int(rank), "profiler_info_rank_id", info_path
    for db in files["profiler_dbs"]:
        match = _PROFILER_DB.match(Path(db).name)
        if match and match.group(1) is not None:
            return int(match.group(1)), "profiler_db_filename", Path(db)
    from_name = _rank_from_dir_name(rank_dir.name, metadata)
    if from_name is not None:
        return from_name, "dir_name", rank_dir
    return ordinal, "ordinal", rank_dir


def _rank_twice(root: Path, rank_id: int, first: Path, second: Path) -> BadInput:
    return BadInput(
        root,
        f"rank {rank_id} appears twice: {first} and {second} (several captures in one folder? "
        f"npuprof sweep --search-root {root} analyzes each as a root of its own)",
    )


def discover(path: str | Path) -> RootInputs:
    """Discover the ranks and files of the profiling root at ``path``."""
    requested = Path(path)
    if not requested.exists():
        raise BadInput(requested, "no such file or directory")
    manifest_path: Path | None = None
    root = requested
    if requested.is_file():
        if not _is_collection_manifest(requested):
            raise BadInput(requested, "expected a profiling directory or a collection manifest.json")
        root, manifest_path = _resolve_collection_manifest(requested)
    elif _is_collection_manifest(requested / COLLECTION_MANIFEST):
        root, manifest_path = _resolve_collection_manifest(requested / COLLECTION_MANIFEST)
    if root.name == PROFILER_OUTPUT:
        root = root.parent
    if not os.access(root, os.R_OK | os.X_OK):
        raise BadInput(root, "directory is not readable")

    rank_dirs, passed_over, not_followed = find_rank_dirs(root)
    if not rank_dirs:
        skipped = f"; passed over as backups or internals: {', '.join(p.name for p in passed_over[:5])}"
        raise BadInput(
            root,
            "no profiling data found (no ASCEND_PROFILER_OUTPUT, kernel_details.csv, profiler db or profiler_info "
            f"json){skipped if passed_over else ''}",
        )
    ranks: list[RankInput] = []
    seen: dict[int, Path] = {}
    for ordinal, rank_dir in enumerate(rank_dirs):
        files = _files_of_rank(rank_dir)
        rank_id, rank_from, info_path, metadata_path = _rank_identity(rank_dir, ordinal, files)
        if rank_id in seen:
            raise _rank_twice(root, rank_id, seen[rank_id], rank_dir)
        seen[rank_id] = rank_dir
        ranks.append(
            RankInput(
                rank_id=rank_id,
                rank_dir=str(rank_dir),
                rank_id_from=rank_from,
                kernel_csv=files["kernel_csv"],
                op_summary_csvs=files["op_summary_csvs"],
                profiler_dbs=files["profiler_dbs"],
                profiler_info=str(info_path) if info_path else None,
                profiler_metadata=str(metadata_path) if metadata_path else None,
                supplemental=files["supplemental"],
                source_states={
                    path: file_state(path)
                    for path in [files["kernel_csv"], *files["op_summary_csvs"], *files["profiler_dbs"]]
                    if path
                },
            )
        )
    if not any(r.has_kernel_source() for r in ranks):
        raise BadInput(
            root,
            f"none of the {len(ranks)} rank dirs holds kernel data (kernel_details.csv, op_summary csv or profiler db)",
        )
    ranks.sort(key=lambda r: r.rank_id)
    links = [str(p) for p in not_followed]
    return RootInputs(str(requested), str(root), ranks, str(manifest_path) if manifest_path else None, links)
