"""Kernel categorisation and op_type, driven by ``knowledge/kernel_signatures.yaml``.

Both work on the *unique* (name, type, core) keys of a table, never per event: a 1 M-event rank
has a few thousand distinct kernels, so the Python loop here runs over those and the result is
joined back with a vectorised Arrow ``take``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from npuprof import knowledge

_NON_ALNUM = re.compile(r"[^0-9a-z]+")


def fold(text: object) -> str:
    """Lower-case and drop everything that is not a letter or digit (``hcom_allReduce_`` → ``hcomallreduce``)."""
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return ""
    return _NON_ALNUM.sub("", str(text).lower())


@dataclass(frozen=True)
class SignatureRule:
    rule_id: str
    any_of: tuple[str, ...]
    all_of: tuple[str, ...]
    none_of: tuple[str, ...]
    starts_with_any: tuple[str, ...]
    unless_category_prefix: tuple[str, ...]
    categories: tuple[str, ...]
    roles: tuple[str, ...]

    def matches(self, text: str, folded_name: str, categories_so_far: list[str]) -> bool:
        if self.any_of and not any(token in text for token in self.any_of):
            return False
        if self.all_of and not all(token in text for token in self.all_of):
            return False
        if self.none_of and any(token in text for token in self.none_of):
            return False
        if self.starts_with_any and not folded_name.startswith(self.starts_with_any):
            return False
        if self.unless_category_prefix and any(c.startswith(self.unless_category_prefix) for c in categories_so_far):
            return False
        return True


_CLAUSES = ("any_of", "all_of", "none_of", "starts_with_any", "unless_category_prefix")


@lru_cache(maxsize=1)
def load_rules() -> tuple[SignatureRule, ...]:
    """The ordered rules of kernel_signatures.yaml (tokens folded like the text they test)."""
    rules = []
    for raw in knowledge.load("kernel_signatures")["rules"]:
        fields = {key: tuple(fold(t) for t in raw.get(key, ())) for key in _CLAUSES if key != "unless_category_prefix"}
        rules.append(
            SignatureRule(
                rule_id=raw["id"],
                unless_category_prefix=tuple(raw.get("unless_category_prefix", ())),
                categories=tuple(raw.get("categories", ())),
                roles=tuple(raw.get("roles", ())),
                **fields,
            )
        )
    return tuple(rules)


def classify_kernel(name: object, kernel_type: object = "", core: object = "") -> tuple[list[str], list[str]]:
    """Categories and roles of one kernel, as the union of every matching rule (in rule order).

    The kernel is identified by its ``Type`` (op type) when the capture has one, else by its name:
    real names carry the launching aclnn API as a prefix (``aclnnEmbedding_GatherV2AiCore_GatherV2``,
    ``aclnnMatmul_TransData``), which would otherwise make a Cast an "embedding".
    """
    identity = fold(kernel_type) or fold(name)
    text = " ".join((identity, fold(core)))
    folded_name = identity
    categories: list[str] = []
    roles: list[str] = []
    for rule in load_rules():
        if rule.matches(text, folded_name, categories):
            categories.extend(c for c in rule.categories if c not in categories)
            roles.extend(r for r in rule.roles if r not in roles)
    return categories, roles


def _codes(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list]:
    """Dictionary codes (nulls → code of None) and the distinct values of a string column."""
    encoded = pc.dictionary_encode(
        pa.chunked_array([values]) if isinstance(values, pa.Array) else values, null_encoding="encode"
    )
    combined = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
    return combined.indices.to_numpy(zero_copy_only=False).astype(np.int64), combined.dictionary.to_pylist()


def categorize(
    name: pa.ChunkedArray, kernel_type: pa.ChunkedArray, core: pa.ChunkedArray
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Per-event categories (list), roles (list) and primary category, computed once per distinct kernel.

    The kernel identity is ``Type`` when present, else ``Name`` (see ``classify_kernel``).
    """
    identity = pc.coalesce(kernel_type, name)
    id_codes, id_values = _codes(identity)
    core_codes, core_values = _codes(core)
    combined = id_codes * max(len(core_values), 1) + core_codes
    keys, inverse = np.unique(combined, return_inverse=True)
    unique_cats, unique_roles = [], []
    for key in keys.tolist():  # a loop over distinct kernels, not over events
        cats, roles = classify_kernel(
            id_values[key // max(len(core_values), 1)], "", core_values[key % max(len(core_values), 1)]
        )
        unique_cats.append(cats)
        unique_roles.append(roles)
    take = pa.array(inverse.astype(np.int64).ravel())
    categories = pa.array(unique_cats, type=pa.list_(pa.string())).take(take)
    roles = pa.array(unique_roles, type=pa.list_(pa.string())).take(take)
    primary = pa.array([c[0] if c else None for c in unique_cats], type=pa.string()).take(take)
    return categories, roles, primary


# --- op_type from Accelerator Core (reference-analyzer §3.2) ----------------------------------

AICORE_OP_TYPES = ("aic", "aiv", "mix_cv", "mix_comm_aiv")  # op types whose tasks run on AI cores


def op_type_of_core(core: object) -> str:
    """op_type of one Accelerator Core string (before the mix_comm_aiv refinement), by the
    ``op_type_by_core`` rules of kernel_signatures.yaml."""
    rules = knowledge.load("kernel_signatures")["op_type_by_core"]
    if core is None or (isinstance(core, float) and np.isnan(core)):
        return rules["default"]
    text = str(core).strip().upper()
    if text in rules["exact"]:
        return rules["exact"][text]
    for rule in rules["fallback"]:
        if ("contains" in rule and rule["contains"] in text) or ("suffix" in rule and text.endswith(rule["suffix"])):
            return rule["op_type"]
    return rules["default"]


def op_types(core: pa.ChunkedArray, aiv_work: np.ndarray) -> pa.Array:
    """Vectorised op_type: the core mapping per distinct core, then communication with AIV work
    (``aiv_work`` true: aiv_time or any AIV pipeline stage > 0) becomes ``mix_comm_aiv``."""
    codes, values = _codes(core)
    mapped = np.array([op_type_of_core(v) for v in values] or ["unknown"], dtype=object)
    result = mapped[codes]
    result = np.where((result == "communication") & aiv_work, "mix_comm_aiv", result)
    return pa.array(result, type=pa.string())
