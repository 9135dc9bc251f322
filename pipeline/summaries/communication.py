"""Communication ops: their kind (allreduce, send_recv, ...) and the parallel role (DP, TP, PP, EP)
of the group they ran in, per event; then per-rank and rank-merged HCCL tables."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.kernel_categories import fold
from npuprof.pipeline.sources.group_hash import double_hash

COMMUNICATION_OP_TYPES = ("communication", "mix_comm_aiv")
# where a rank's per-op split (transit / wait / idle) came from: the analyzer's records, as JSON files
# (text export) or as analysis.db tables (db export); "events" where neither could be read
COMMUNICATION_JSON, ANALYSIS_DB = "communication_json", "analysis_db"
SPLIT_SOURCES = (COMMUNICATION_JSON, ANALYSIS_DB)


def communication_kinds(identity: pd.Series) -> np.ndarray:
    """The kind of each communication op from its Type (else Name), one rule pass per distinct name."""
    rules = knowledge.load("summary_rules")
    codes, uniques = pd.factorize(identity.fillna(""))
    kinds = []
    for text in uniques:
        folded = fold(text)
        kind = next((r["kind"] for r in rules["communication_kinds"] if any(t in folded for t in r["any_of"])), None)
        kinds.append(kind or rules["communication_kind_default"])
    table = np.array(kinds or [rules["communication_kind_default"]], dtype=object)
    return table[codes] if len(codes) else table[:0]


def _expected_members(group_name: str, distributed_args: dict | None) -> int | None:
    """How many ranks a group of that name has under the job's parallel sizes (None: not known)."""
    sizes = distributed_args if isinstance(distributed_args, dict) else {}
    factors = knowledge.load("summary_rules")["group_member_count"].get(group_name)
    if not factors:
        return None
    values = [sizes.get(key) for key in factors]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return None
    return int(np.prod(values))


def role_of(group: object, distributed_args: dict | None = None) -> str:
    """The role a group's name gives, kept only where its member count agrees with the parallel
    sizes: a 'tp' group of two ranks in a TP1 job is not tensor parallel, so its role is unknown."""
    rules = knowledge.load("summary_rules")
    name = group.get("group_name") if isinstance(group, dict) else None
    role = rules["parallel_roles"].get(str(name), rules["parallel_role_unknown"])
    members = group.get("global_ranks") if isinstance(group, dict) else None
    expected = _expected_members(str(name), distributed_args)
    if isinstance(members, list) and expected is not None and len(members) != expected:
        return rules["parallel_role_unknown"]
    return role


def role_by_group_hash(parallel_group_info: dict | None, distributed_args: dict | None = None) -> dict[str, str]:
    """{double_hash(group key) as text: parallel role}: how communication files name groups."""
    return {
        str(double_hash(str(key))): role_of(group, distributed_args)
        for key, group in (parallel_group_info or {}).items()
    }


def global_ranks_by_group_hash(group_infos: list[dict | None]) -> dict[str, list[int]]:
    """{double_hash(group key) as text: the group's global ranks}, over every rank's parallel_group_info."""
    found: dict[str, list[int]] = {}
    for info in group_infos:
        for key, group in (info or {}).items():
            ranks = group.get("global_ranks") if isinstance(group, dict) else None
            if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
                found.setdefault(str(double_hash(str(key))), ranks)
    return found


def captured_group_ranks(capture: dict) -> dict[str, list[int]]:
    """``global_ranks_by_group_hash`` over the ranks of a capture_info.json."""
    return global_ranks_by_group_hash([rank.get("parallel_group_info") for rank in capture.get("ranks", [])])


def group_ranks_of_names(names: pd.Series, group_infos: list[dict | None]) -> list[list[int] | None]:
    """The global ranks of each HCCL op's group, from the group-hash digits in its name (None when
    the name or the metadata cannot tell)."""
    pattern = re.compile(knowledge.load("summary_rules")["hccl_name_pattern"])
    by_suffix: dict[str, list[list[int]]] = {}
    for group_hash, ranks in global_ranks_by_group_hash(group_infos).items():
        by_suffix.setdefault(group_hash[-3:], []).append(ranks)
    found = []
    for name in names:  # a loop over op names (callers pass distinct ones)
        match = pattern.match(str(name))
        groups = by_suffix.get(match.group("group_suffix"), []) if match else []
        found.append(groups[0] if len(groups) == 1 else None)
    return found


def role_by_group_suffix(parallel_group_info: dict | None, distributed_args: dict | None = None) -> dict[str, str]:
    """{last 3 digits of a group's hash: its parallel role}; a suffix two groups share is left out
    (it cannot tell them apart)."""
    found: dict[str, set[str]] = {}
    for group_hash, role in role_by_group_hash(parallel_group_info, distributed_args).items():
        found.setdefault(group_hash[-3:], set()).add(role)
    return {suffix: roles.pop() for suffix, roles in found.items() if len(roles) == 1}


def _hccl_name_part(uniques: np.ndarray, part: str) -> np.ndarray:
    """One named group of ``hccl_name_pattern`` for each distinct name (None where it does not match)."""
    pattern = re.compile(knowledge.load("summary_rules")["hccl_name_pattern"])
    # every collective has its own name (a call counter): the pattern runs in Arrow's regex engine
    # over the distinct names; Python's re only where they are not ASCII (its \\d is wider)
    text = pa.array(np.asarray(uniques, dtype=object), pa.string())
    found = pc.struct_field(pc.extract_regex(text, pattern.pattern), part).to_numpy(zero_copy_only=False)
    found = found.astype(object)
    for index in np.flatnonzero(~pc.string_is_ascii(text).to_numpy(zero_copy_only=False)):
        match = pattern.match(uniques[index])
        found[index] = match.group(part) if match else None
    return found


def call_families(names: pd.Series) -> np.ndarray:
    """Each op's name with an HCCL call's own counter replaced by ``*`` (``hcom_allReduce__170_*``:
    every call of that kind in that group); other names are returned as they are."""
    codes, uniques = pd.factorize(names)
    if not len(uniques):
        return np.full(len(codes), None, dtype=object)
    family = _hccl_name_part(uniques, "call_family")
    labels = np.asarray(uniques, dtype=object).copy()
    matched = ~pd.isna(family)
    labels[matched] = family[matched] + "_*"
    return np.where(codes >= 0, labels[codes], None)


def parallel_roles(
    names: pd.Series,
    parallel_group_info: dict | None,
    distributed_args: dict | None = None,
    kinds: pd.Series | None = None,
) -> np.ndarray:
    """The parallel role of each communication op from the group hash digits in its name; an op whose
    name names no group takes the role its ``kinds`` entry implies (``role_of_kind``: a MoE dispatch
    communicates in the expert-parallel group by construction)."""
    rules = knowledge.load("summary_rules")
    by_suffix = role_by_group_suffix(parallel_group_info, distributed_args)
    codes, uniques = pd.factorize(names.fillna(""))
    if not len(codes):
        return np.array([], dtype=object)
    suffix = _hccl_name_part(uniques, "group_suffix")
    unknown = rules["parallel_role_unknown"]
    roles = np.array([by_suffix.get(x) or unknown if x is not None else unknown for x in suffix], dtype=object)
    roles = roles[codes]
    if kinds is not None:
        implied = pd.Series(kinds, dtype=object).map(rules["role_of_kind"]).to_numpy(object)
        roles = np.where((roles == unknown) & pd.notna(implied), implied, roles)
    return roles


def agreed_roles(
    event_names: pd.Series, event_roles: np.ndarray, op_names: pd.Series, op_roles: pd.Series
) -> tuple[np.ndarray, np.ndarray]:
    """One parallel role per op name for every table of a rank (events, ops, links' ops): the role its
    communication file's full group hash gives where that is known, else the one its events got (the
    hash digits in its name, else what its kind implies). Two groups whose hashes end in the same
    digits leave the name's role unknown; the file's full hash still tells them apart."""
    unknown = knowledge.load("summary_rules")["parallel_role_unknown"]
    ops = pd.DataFrame({"name": op_names.to_numpy(object), "role": op_roles.to_numpy(object)})
    by_file = ops[ops["role"] != unknown].drop_duplicates("name").set_index("name")["role"]
    events = pd.DataFrame({"name": event_names.to_numpy(object), "role": np.asarray(event_roles, dtype=object)})
    by_events = events[events["role"].notna() & (events["role"] != unknown)].drop_duplicates("name")
    by_events = by_events.set_index("name")["role"]
    from_file = events["name"].map(by_file)
    agreed_events = from_file.where(from_file.notna() & events["role"].notna(), events["role"]).to_numpy(object)
    from_events = ops["name"].map(by_events)
    from_events = from_events.where(from_events.notna(), unknown)  # not fillna: object dtype stays object
    agreed_ops = ops["role"].where(ops["role"] != unknown, from_events).to_numpy(object)
    return agreed_events, agreed_ops


def communication_ops(
    file_ops: pd.DataFrame | None,
    file_links: pd.DataFrame | None,
    comm_events: pd.DataFrame,
    step_ids: pd.Series,
    rank_info: dict,
    file_source: str = COMMUNICATION_JSON,
) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(ops, links, source) of one rank: ``file_ops`` / ``file_links`` as its communication.json /
    communication_matrix.json (or analysis.db: ``file_source``) give them, or, without the ops (no
    file, or an unreadable one), the ops from its communication events (transit / wait unknown).
    ``rank_info``: the rank's capture facts (its parallel_group_info and distributed_args name the roles)."""
    rules = knowledge.load("summary_rules")
    roles = role_by_group_hash(rank_info.get("parallel_group_info"), rank_info.get("distributed_args"))
    unknown = rules["parallel_role_unknown"]
    links = pd.DataFrame()
    if file_links is not None:
        links = file_links.assign(parallel_role=file_links["group_hash"].map(lambda h: roles.get(h, unknown)))
    if file_ops is not None:
        ops = file_ops
        ops["parallel_role"] = ops["group_hash"].map(lambda h: roles.get(h, unknown))
        ops["source"] = file_source
        return ops, links, file_source
    ops = pd.DataFrame(
        {
            "step_id": step_ids.reindex(comm_events["step_ordinal"]).to_numpy(),
            "op_scope": np.where(comm_events["kind"] == "send_recv", "p2p", "collective"),
            "op_name": comm_events["name"].to_numpy(),
            "group_hash": None,
            "parallel_role": comm_events["parallel_role"].to_numpy(),
            "source": "events",
            "start_us": comm_events["start_ns"].to_numpy() / 1000.0,
            "elapse_ms": comm_events["duration_ns"].to_numpy() / 1e6,
        }
    )
    return ops.reindex(columns=list(schema.COMMUNICATION_OPS.columns)), links, "events"  # no split: null
