"""Anomaly tags of each step: thresholds of ``knowledge/diagnosis_rules.yaml`` (``anomaly_tags``)
applied to classify's step measurements (idle share, largest internal gap) and to the gaps between
a rank's consecutive steps, with their wording. Decided here, in diagnostics, so a changed
threshold needs only ``--from-stage diagnostics``; segment's own tags (partial capture, no step
marks) are carried along."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from npuprof import knowledge

# what the tags read of the step summary
STEP_TAG_COLUMNS = (
    "rank_id",
    "step_ordinal",
    "step_id",
    "tags",
    "wall_ms",
    "underfeed_ratio",
    "largest_internal_bubble_ms",
    "prelaunch_gap_ms",
    "tail_gap_ms",
)
OUTPUT_COLUMNS = ["rank_id", "step_ordinal", "step_id", "anomaly_tags", "anomaly_text"]


def _gap_limit(rules: dict, tag: str, wall_ms: pd.Series) -> pd.Series:
    return np.maximum(rules[tag]["min_ms"], rules[tag]["min_wall_share"] * wall_ms)


def _flags(steps: pd.DataFrame, rules: dict) -> dict[str, np.ndarray]:
    """Each measured tag's flag per step."""
    wall = steps["wall_ms"]
    computed = {
        "DEVICE_IDLE_GAP_HEAVY": steps["underfeed_ratio"] >= rules["DEVICE_IDLE_GAP_HEAVY"]["underfeed_ratio_min"],
        "INTERNAL_BUBBLE_HEAVY": steps["largest_internal_bubble_ms"]
        >= _gap_limit(rules, "INTERNAL_BUBBLE_HEAVY", wall),
        "PRELAUNCH_GAP_HEAVY": steps["prelaunch_gap_ms"].notna()
        & (steps["prelaunch_gap_ms"] >= _gap_limit(rules, "PRELAUNCH_GAP_HEAVY", wall)),
        "TAIL_GAP_HEAVY": steps["tail_gap_ms"].notna()
        & (steps["tail_gap_ms"] >= _gap_limit(rules, "TAIL_GAP_HEAVY", wall)),
    }
    return {tag: mask.to_numpy(bool) for tag, mask in computed.items()}


def step_anomaly_tags(steps: pd.DataFrame) -> pd.DataFrame:
    """rank_id, step_ordinal, step_id, anomaly_tags (';'-joined) and anomaly_text of every step.

    Gaps to neighbouring steps (classify's ``prelaunch_gap_ms``, ``tail_gap_ms``) are unknown, so
    never tagged, at a rank's first and last step. Only tagged steps are worded (a loop over them alone)."""
    if steps.empty:
        return pd.DataFrame(columns=OUTPUT_COLUMNS)
    rules = knowledge.load("diagnosis_rules")["anomaly_tags"]
    steps = steps.sort_values(["rank_id", "step_ordinal"], kind="stable").reset_index(drop=True)
    flags = _flags(steps, rules)
    given = steps["tags"].fillna("").astype(str).to_numpy(object)
    tagged = np.flatnonzero((given != "") | np.logical_or.reduce(list(flags.values())))
    tags = np.full(len(steps), "", dtype=object)
    texts = np.full(len(steps), "", dtype=object)
    for i, row in zip(tagged, steps.iloc[tagged].itertuples()):
        found = list(dict.fromkeys([t for t in given[i].split(";") if t] + [t for t, f in flags.items() if f[i]]))
        values = {
            "underfeed_ratio": row.underfeed_ratio,
            "largest_bubble_ms": row.largest_internal_bubble_ms,
            "largest_bubble_share": row.largest_internal_bubble_ms / row.wall_ms if row.wall_ms else 0.0,
            "prelaunch_gap_ms": row.prelaunch_gap_ms,
            "tail_gap_ms": row.tail_gap_ms,
        }
        tags[i] = ";".join(found)
        texts[i] = "; ".join(rules[tag]["text"].format(**values) for tag in found)
    return steps.assign(anomaly_tags=tags, anomaly_text=texts)[OUTPUT_COLUMNS]


def has_tag(tags: pd.Series, wanted: list[str]) -> pd.Series:
    """Whether each step's ';'-joined tags hold one of ``wanted`` (whole tags, never substrings)."""
    pattern = "(?:^|;)(?:" + "|".join(re.escape(tag) for tag in wanted) + ")(?:;|$)"
    return tags.fillna("").astype(str).str.contains(pattern, regex=True)
