"""Facts about how each rank was captured: profiler level, PMU metric set, versions, parallelism.

Read from profiler_info_<N>.json, profiler_metadata.json and, for db captures, the db's META_DATA
and NPU_INFO. Missing facts stay null: nothing here is guessed.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from npuprof.pipeline.sources.auxiliary import read_auxiliary, read_json_object
from npuprof.pipeline.sources.discovery import RankInput, RootInputs
from npuprof.pipeline.sources.profiler_db import connect_readonly, table_names


def _object(value: object) -> dict:
    """``value`` when it is a JSON object; {} for any other type (a capture's file of the wrong shape)."""
    return value if isinstance(value, dict) else {}


def _from_profiler_info(info: dict) -> dict:
    config = _object(info.get("config"))
    experimental, common = _object(config.get("experimental_config")), _object(config.get("common_config"))
    return {
        "profiler_level": experimental.get("_profiler_level"),
        "aic_metrics": experimental.get("_aic_metrics"),
        "export_type": experimental.get("_export_type"),
        "activities": common.get("activities"),
        "schedule": common.get("schedule"),
        "record_shapes": common.get("record_shapes"),
        "with_stack": common.get("with_stack"),
        "cann_version": info.get("cann_version"),
        "torch_npu_version": info.get("torch_npu_version"),
        "rank_id_in_file": info.get("rank_id"),
    }


def _from_db(path: Path) -> dict:
    facts: dict = {}
    try:
        with connect_readonly(path) as con:
            tables = table_names(con)
            if "META_DATA" in tables:
                meta = dict(con.execute("SELECT name, value FROM META_DATA").fetchall())
                facts["db_schema_version"] = meta.get("SCHEMA_VERSION")
                for key in ("distributed_args", "parallel_group_info", "ENV_VARIABLES"):
                    if key in meta:
                        try:
                            facts[key] = json.loads(meta[key])
                        except (TypeError, json.JSONDecodeError):
                            facts[key] = None
            if "NPU_INFO" in tables:
                facts["npu_names"] = sorted({r[0] for r in con.execute("SELECT name FROM NPU_INFO") if r[0]})
            if "HOST_INFO" in tables:
                names = sorted({str(r[0]) for r in con.execute("SELECT hostName FROM HOST_INFO") if r[0]})
                facts["host_name"] = names[0] if len(names) == 1 else None
            if "RANK_DEVICE_MAP" in tables:
                devices = {int(r[0]) for r in con.execute("SELECT deviceId FROM RANK_DEVICE_MAP") if r[0] is not None}
                facts["device_id"] = devices.pop() if len(devices) == 1 else None
    except sqlite3.Error:
        pass  # the probe in normalize reports unreadable dbs; capture facts are best effort by design
    return facts


def _from_cann_info(rank_dir: Path, rank_id: int) -> tuple[dict, list[dict]]:
    """Host name, device id and the card's core counts from the CANN raw data's info.json files
    (``PROF_*/host|device_<id>/``), and a note for each that cannot be read.

    They are tiny; only the first of each is read. A count that is not a positive integer is ignored:
    the analysis then says what it could not judge without it.
    """
    facts: dict = {}
    notes: list[dict] = []
    for info in sorted(rank_dir.glob("PROF_*/host/info.json*"))[:1]:
        found, note = read_auxiliary(read_json_object, info, rank_id, "host name from the rank directory's name")
        host = (found or {}).get("hostname")
        facts["host_name"] = str(host)[:256] if host else None
        notes += [note] if note else []
    devices = sorted({p.name.removeprefix("device_") for p in rank_dir.glob("PROF_*/device_*") if p.is_dir()})
    if len(devices) == 1 and devices[0].isdigit():
        facts["device_id"] = int(devices[0])
    for info in sorted(rank_dir.glob("PROF_*/device_*/info.json*"))[:1]:
        fallback = "core counts unknown for this rank: block dims judged by the chosen hardware's, or not judged"
        found, note = read_auxiliary(read_json_object, info, rank_id, fallback)
        cards = (found or {}).get("DeviceInfo")
        card = cards[0] if isinstance(cards, list) and cards and isinstance(cards[0], dict) else {}
        # the cube (AI Core) and vector cores a kernel's blocks spread over: its block dim's ceiling
        facts["ai_core_count"] = _positive_int(card.get("ai_core_num"))
        facts["vector_core_count"] = _positive_int(card.get("aiv_num"))
        notes += [note] if note else []
    return facts, notes


def _positive_int(value: object) -> int | None:
    try:
        number = int(str(value))
    except ValueError:
        return None
    return number if 0 < number <= 4096 else None


# torch_npu names a rank's dir {worker_name}_{timestamp}_ascend_pt, and worker_name defaults to
# {hostname}_{pid}: the host is what precedes "_<pid>_<timestamp>_ascend_pt"
_DEFAULT_RANK_DIR = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)_\d+_\d{14,20}_ascend_pt$")


def _from_rank_dir_name(rank_dir: Path) -> dict:
    """The host name in a rank dir named by torch_npu's default worker name (else nothing)."""
    found = _DEFAULT_RANK_DIR.match(rank_dir.name)
    return {"host_name": found["host"]} if found else {}


def rank_capture_info(rank: RankInput) -> dict:
    """Capture facts of one rank (null where the capture does not say)."""
    facts: dict = {
        "rank_id": rank.rank_id,
        "rank_dir": rank.rank_dir,
        "rank_id_from": rank.rank_id_from,
        "profiler_level": None,
        "aic_metrics": None,
        "cann_version": None,
        "torch_npu_version": None,
        "distributed_args": None,
        "parallel_group_info": None,
        "host_name": None,  # the machine and card the rank ran on: a sweep's fleet view joins on them
        "host_name_from": None,  # profiler_db (HOST_INFO) | cann_info (PROF_*/host/info.json) | rank_dir_name
        "device_id": None,
        "ai_core_count": None,  # CANN's device info.json (ai_core_num, aiv_num): the block dim's ceilings
        "vector_core_count": None,
        # the environment variables torch_npu records (ENV_VARIABLES: "" where unset)
        "env_variables": None,
    }
    unreadable = []
    if rank.profiler_info:
        fallback = "profiler level, AIC metrics and versions unknown for this rank"
        info, note = read_auxiliary(read_json_object, rank.profiler_info, rank.rank_id, fallback)
        facts.update(_from_profiler_info(info) if info else {})
        unreadable += [note] if note else []
    if rank.profiler_metadata:
        fallback = "parallel sizes and groups unknown for this rank: communication roles unknown"
        metadata, note = read_auxiliary(read_json_object, rank.profiler_metadata, rank.rank_id, fallback)
        if metadata:
            facts["distributed_args"] = _object(metadata.get("distributed_args")) or None
            facts["parallel_group_info"] = _object(metadata.get("parallel_group_info")) or None
            facts["env_variables"] = _object(metadata.get("ENV_VARIABLES")) or None
        unreadable += [note] if note else []
    rank_dir = Path(rank.rank_dir)
    cann, notes = _from_cann_info(rank_dir, rank.rank_id)
    unreadable += notes
    sources = [(_from_db(Path(db)), "profiler_db") for db in rank.profiler_dbs[:1]]
    sources += [(cann, "cann_info"), (_from_rank_dir_name(rank_dir), "rank_dir_name")]
    for found, source in sources:  # the first source that says a fact wins
        if found.get("host_name") and facts.get("host_name") is None:
            facts["host_name_from"] = source
        for key, value in found.items():
            key = "env_variables" if key == "ENV_VARIABLES" else key
            if facts.get(key) is None:
                facts[key] = value
    if unreadable:
        facts["unreadable"] = unreadable
    return facts


def _shared_part(value: object) -> object:
    """distributed_args without its per-rank ``rank`` entry, so ranks of one job agree."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "rank"}
    return value


def capture_info(inputs: RootInputs) -> dict:
    """capture_info.json: per-rank facts plus the values all ranks agree on."""
    ranks = [rank_capture_info(r) for r in inputs.ranks]
    common = {}
    for key in ("profiler_level", "aic_metrics", "cann_version", "torch_npu_version", "distributed_args"):
        values = {json.dumps(_shared_part(r.get(key)), sort_keys=True) for r in ranks if r.get(key) is not None}
        common[key] = json.loads(values.pop()) if len(values) == 1 else None
    return {"root": inputs.root, "rank_count": len(ranks), "common": common, "ranks": ranks}
