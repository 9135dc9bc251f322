"""The vocabulary of the model fingerprint: an inferred field with its evidence, the capture's
parallel sizes, and the helpers that pick kernels of model_shapes.yaml and cite the rows they came
from. ``fingerprint.py`` reads the fields with these."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.distinct import map_distinct
from npuprof.pipeline.modelinfo.shapes import parse_shapes

CONFIDENCE_ORDER = ("high", "medium", "low")
# features that are attention of some kind: each is evidence of a transformer
ATTENTION_FEATURES = ("mla", "dsa", "csa", "linear_attention")


@dataclass
class Field:
    """One inferred config field with where it was read."""

    value: object = None
    confidence: str = "none"
    method: str = ""
    evidence: list[dict] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict:
        return {
            "value": self.value,
            "confidence": self.confidence,
            "method": self.method,
            "evidence": self.evidence,
            "note": self.note,
        }


@dataclass
class Parallel:
    """Parallel sizes from the capture's distributed_args (None where it does not say)."""

    tp: int | None = None
    pp: int | None = None
    ep: int | None = None

    @classmethod
    def from_capture(cls, capture_info: dict) -> Parallel:
        args = (capture_info.get("common") or {}).get("distributed_args") or {}
        sizes = {}
        for key, name in (
            ("tp", "tensor_model_parallel_size"),
            ("pp", "pipeline_model_parallel_size"),
            ("ep", "expert_model_parallel_size"),
        ):
            value = args.get(name)
            sizes[key] = value if isinstance(value, int) and value > 0 else None
        return cls(**sizes)


@lru_cache(maxsize=None)
def kernel_pattern(group: str, key: str) -> re.Pattern:
    patterns = knowledge.load("model_shapes")[group][key]
    return re.compile("|".join(f"(?:{p})" for p in patterns))


def of_kernels(ops: pd.DataFrame, group: str, key: str) -> pd.DataFrame:
    """Rows of ``ops`` whose kernel Type fully matches one of the ``<group>.<key>`` kernels of
    model_shapes.yaml (each distinct Type is matched once: shape ops repeat Types many times)."""
    pattern = kernel_pattern(group, key)
    types = ops["type"].dropna().unique()
    matching = [t for t in types if isinstance(t, str) and pattern.fullmatch(t)]
    return ops[ops["type"].isin(matching)]


def of_field(ops: pd.DataFrame, key: str) -> pd.DataFrame:
    """Rows of ``ops`` whose kernel Type is one of the ``fields.<key>`` kernels."""
    return of_kernels(ops, "fields", key)


def evidence_of(row: pd.Series) -> dict:
    return {
        "kernel": row["type"],
        "shapes": f"{row['input_shapes']} -> {row['output_shapes']}",
        "rank_id": int(row["rank_id"]),
        "row": int(row["row_start"]),
        "evidence_id": row.get("evidence_id"),
        "calls": int(row["call_count"]),
    }


def prepare(ops: pd.DataFrame) -> pd.DataFrame:
    """Distinct shape ops of every rank with parsed shapes (``ins``, ``outs``), most called first."""
    frame = ops.sort_values(["call_count", "rank_id"], ascending=[False, True], kind="stable").reset_index(drop=True)
    frame["ins"] = map_distinct(frame["input_shapes"], parse_shapes)
    frame["outs"] = map_distinct(frame["output_shapes"], parse_shapes)
    return frame


def weighted_mode(pairs: list[tuple[object, int, pd.Series]]) -> tuple[object, list[pd.Series]]:
    """The value with the most calls, and the rows that show it (most called first)."""
    counts: Counter = Counter()
    rows: dict[object, list[pd.Series]] = {}
    for value, calls, row in pairs:
        counts[value] += calls
        rows.setdefault(value, []).append(row)
    value = counts.most_common(1)[0][0]
    return value, rows[value]


def scaled(local: int, size: int | None, what: str, axis: str) -> tuple[int, str, str]:
    """(value, confidence cap, note) of a per-rank shard scaled by a parallel size."""
    if size is None:
        return local, "low", f"{what} per rank; the capture does not record the {axis} size"
    if size == 1:
        return local, "high", ""
    return local * size, "medium", f"{local} per rank × {axis} {size}"


def capped(confidence: str, cap: str) -> str:
    return max(confidence, cap, key=CONFIDENCE_ORDER.index)
