"""Kernel categorisation and op_type, driven by ``knowledge/kernel_signatures.yaml``.

Both work on the *unique* (name, type, core) keys of a table, never per event: a 1 M-event rank
has a few thousand distinct kernels, so the Python loop here runs over those and the result is
joined back by a vectorised ``pandas.factorize``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

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
        if self.unless_category_prefix and any(
            c.startswith(self.unless_category_prefix) for c in categories_so_far
        ):
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


def categorize(frame: pd.DataFrame) -> tuple[list, list, list]:
    """Per-row categories, roles and primary category for a frame with name/type/accelerator_core.

    Returns three lists aligned with ``frame`` (Arrow-friendly: lists of lists / strings).
    """
    keys = frame["name"].astype("string").fillna("") + "\x1f" + frame["type"].astype("string").fillna("") + "\x1f" + frame["accelerator_core"].astype("string").fillna("")
    codes, uniques = pd.factorize(keys)
    unique_cats: list[list[str]] = []
    unique_roles: list[list[str]] = []
    for key in uniques:
        name, kernel_type, core = str(key).split("\x1f")
        cats, roles = classify_kernel(name, kernel_type, core)
        unique_cats.append(cats)
        unique_roles.append(roles)
    primary = [c[0] if c else None for c in unique_cats]
    codes_list = codes.tolist()
    return (
        [unique_cats[c] for c in codes_list],
        [unique_roles[c] for c in codes_list],
        [primary[c] for c in codes_list],
    )


# --- op_type from Accelerator Core (reference-analyzer §3.2) ----------------------------------

_EXACT_CORE = {
    "AI_CORE": "aic",
    "AICORE": "aic",
    "AI_VECTOR_CORE": "aiv",
    "AIVECTOR": "aiv",
    "AI_VECTORCORE": "aiv",
    "MIX_AIC": "mix_cv",
    "MIX_AIV": "mix_cv",
    "MIX_AICAIV": "mix_cv",
    "MIX_AIC_AIV": "mix_cv",
    "COMMUNICATION": "communication",
    "HCCL": "communication",
    "AI_CPU": "aicpu",
    "AICPU": "aicpu",
    "DSA_SQE": "dsa",
}


def op_type_of_core(core: object) -> str:
    """op_type of one Accelerator Core string (before the mix_comm_aiv refinement)."""
    if core is None or (isinstance(core, float) and np.isnan(core)):
        return "unknown"
    text = str(core).strip().upper()
    if text in _EXACT_CORE:
        return _EXACT_CORE[text]
    if "MIX" in text:
        return "mix_cv"
    if "COMM" in text or "HCCL" in text:
        return "communication"
    if "VECTOR" in text or text.endswith("_AIV"):
        return "aiv"
    if "CORE" in text:
        return "aic"
    return "unknown"


def op_types(core: pd.Series, aiv_time_us: pd.Series, aiv_stage_sum_us: pd.Series) -> np.ndarray:
    """Vectorised op_type: core mapping, then communication with AIV work becomes mix_comm_aiv."""
    codes, uniques = pd.factorize(core.astype("string").fillna(""), use_na_sentinel=False)
    mapped = np.array([op_type_of_core(u if u != "" else None) for u in uniques], dtype=object)
    result = mapped[codes] if len(uniques) else np.array([], dtype=object)
    aiv_work = (aiv_time_us.fillna(0).to_numpy() > 0) | (aiv_stage_sum_us.fillna(0).to_numpy() > 0)
    result = np.where((result == "communication") & aiv_work, "mix_comm_aiv", result)
    return result.astype(object)
