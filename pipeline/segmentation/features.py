"""Per-event flags that segmentation needs, computed once per distinct kernel and joined back."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.device_order import in_device_order
from npuprof.pipeline.distinct import text_codes
from npuprof.pipeline.summaries.communication import COMMUNICATION_OP_TYPES

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RankContext


@dataclass
class EventFeatures:
    """Arrays aligned with the rank's events in device order (start time, then source row)."""

    anchor_family: np.ndarray  # family name where the event anchors a layer, else ""
    backward: np.ndarray  # bool: a training backward kernel (*Grad)
    opening: np.ndarray  # bool: opens a forward layer / block (normalization, block head)
    closing: np.ndarray  # bool: closes a backward layer (normalization grad)
    role_flags: dict[str, np.ndarray]  # role -> bool
    kernel_key: np.ndarray  # int code of the kernel identity (type, else name): for template matching
    fallback: np.ndarray  # bool: candidate fallback anchor (no-attention models)
    pass_marker: np.ndarray  # bool: marks the edge of a pass (p2p send/recv, embedding, sampling, optimizer)
    # bool: a communication op still running when the next event starts — another stream runs it, so
    # where it lands among a layer's kernels (a gradient bucket queued behind a wait) says nothing about
    # the layer; a blocking op (a pipeline receive) is not one
    floating_communication: np.ndarray

    @cached_property
    def markers_before(self) -> np.ndarray:
        """Pass markers before each position (length + 1): a range's count is one subtraction, so
        splitting every step into runs stays linear in the rank's events."""
        return np.concatenate(([0], np.cumsum(self.pass_marker, dtype=np.int64)))


def ordered_events(ctx: RankContext, columns: list[str]) -> pa.Table:
    """The rank's events (only ``columns``, which hold start_ns and row_idx) in device order: the
    order that segment's and classify's positions index. Normalize stores them so (a check, no sort;
    an output of an older npuprof is sorted here)."""
    return in_device_order(ctx.read_table(schema.NORMALIZED_EVENTS, columns=columns))


EVENT_FEATURES = "event_features"  # their name among a chain's derived values


def rank_event_features(ctx: RankContext, events: pa.Table) -> EventFeatures:
    """``event_features`` of the rank's events in device order (``ordered_events``), computed once per
    chain: segment's are classify's (the same events in the same order), a stage run alone computes its own."""
    held = ctx.derived.get(EVENT_FEATURES)
    if held is not None and len(held.backward) == events.num_rows:
        return held
    features = ctx.derived[EVENT_FEATURES] = event_features(events)
    return features


def _set_codes(values: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """(code per event, its set of labels joined by ``|``) of a list column, no set when null: the
    sets as dictionary codes, no Python string made per event."""
    return text_codes(pc.binary_join(values, "|"))


def event_features(events: pa.Table) -> EventFeatures:
    """Flags for every event of one rank, from its categories and roles (a loop over distinct sets only)."""
    rules = knowledge.load("segmentation_rules")
    companions = set(rules["companion_only"])
    family_of = {cat: fam["family"] for fam in rules["attention_families"] for cat in fam["anchors"]}
    fallback_categories = set(rules["fallback_anchors"]["categories"])
    opening_roles = set(rules["opening_roles"])
    pass_marker_categories = set(rules["pass_marker_categories"])

    cat_codes, cat_values = _set_codes(events.column("categories"))
    role_codes, role_values = _set_codes(events.column("roles"))

    def per_category(fn) -> np.ndarray:
        table = np.array([fn(set(v.split("|")) - {""}) for v in cat_values] or [fn(set())])
        return table[cat_codes] if len(cat_codes) else table[:0]

    def per_role(fn) -> np.ndarray:
        table = np.array([fn(set(v.split("|")) - {""}) for v in role_values] or [fn(set())])
        return table[role_codes] if len(role_codes) else table[:0]

    primary = events.column("primary_category").to_pandas().fillna("")
    prim_codes, prim_values = pd.factorize(primary)
    fam_table = np.array(
        [family_of.get(p, "") if p not in companions else "" for p in prim_values] or [""], dtype=object
    )
    anchor_family = fam_table[prim_codes] if len(prim_codes) else fam_table[:0]

    backward = per_category(lambda c: "training.backward" in c)
    is_opening_role = per_role(lambda r: bool(r & opening_roles))
    role_flags = {role: per_role(lambda r, role=role: role in r) for role in rules["feature_roles"]}
    identity = events.column("type").to_pandas().fillna(events.column("name").to_pandas())
    kernel_key, _ = pd.factorize(identity)
    fallback = per_category(lambda c: bool(c & fallback_categories))
    pass_marker = per_category(lambda c: bool(c & pass_marker_categories))
    return EventFeatures(
        anchor_family=anchor_family,
        backward=backward.astype(bool),
        opening=(is_opening_role & ~backward).astype(bool),
        closing=(role_flags["normalization"] & backward).astype(bool),
        role_flags={k: v.astype(bool) for k, v in role_flags.items()},
        kernel_key=kernel_key.astype(np.int64),
        fallback=fallback.astype(bool),
        pass_marker=pass_marker.astype(bool),
        floating_communication=_floating_communication(events),
    )


def _floating_communication(events: pa.Table) -> np.ndarray:
    """Communication ops (``COMMUNICATION_OP_TYPES``) still running when the event after them starts."""
    communication = np.isin(events.column("op_type").to_numpy(zero_copy_only=False), list(COMMUNICATION_OP_TYPES))
    start, end = events.column("start_ns").to_numpy(), events.column("end_ns").to_numpy()
    running_on = np.zeros(len(communication), dtype=bool)
    running_on[:-1] = end[:-1] > start[1:]
    return communication & running_on
