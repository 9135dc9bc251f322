"""A root's serving view: its forwards by phase (forward_summary of every rank) — how many, their device
wall at p50 / p90 / p99, the tokens they computed and the device time per token, the device's idle
between forwards, and the forwards whose batch the shapes did not say. Each phase apart: a percentile
over prefills and decodes together describes neither."""

from __future__ import annotations

import numpy as np
import pandas as pd

PHASES = ("prefill", "mixed", "decode", "dummy")
PERCENTILES = (50, 90, 99)


def _ms(values: pd.Series, q: float) -> float | None:
    values = values.dropna()
    return round(float(np.percentile(values.to_numpy(float), q)) / 1e3, 4) if len(values) else None


def _phase_row(forwards: pd.DataFrame) -> dict:
    tokens = int(forwards["tokens"].sum())
    wall_us = float(forwards["wall_us"].sum())
    return {
        "forwards": int(len(forwards)),
        "requests_mean": round(float(forwards["requests"].mean()), 2),
        "graph_modes": {str(mode): int(n) for mode, n in forwards["graph_mode"].value_counts().sort_index().items()},
        "tokens": tokens,
        # a full graph's padding, where it can be told: the tokens its layers ran beyond the requests
        "padded_tokens": int(forwards["padded_tokens"].sum()) if forwards["padded_tokens"].notna().any() else None,
        **{f"wall_p{q}_ms": _ms(forwards["wall_us"], q) for q in PERCENTILES},
        # over each rank's own forwards: ranks of one tensor-parallel group each compute every token
        "device_us_per_token": round(wall_us / tokens, 3) if tokens else None,
        "tokens_per_device_s": round(tokens / (wall_us / 1e6), 1) if wall_us else None,
        "gap_before_p50_ms": _ms(forwards["gap_before_us"], 50),
        "gap_before_p99_ms": _ms(forwards["gap_before_us"], 99),
    }


def serving_view(forwards: pd.DataFrame) -> dict | None:
    """The view of ``forwards`` (forward_summary over every rank); None when the root ran no inference."""
    if forwards.empty:
        return None
    unknown = forwards[forwards["phase"] == "unknown"]
    return {
        "evidence": "forward_summary.csv: each forward's rows, its attention calls' rows and what they say",
        "ranks": int(forwards["rank_id"].nunique()),
        "forwards": int(len(forwards)),
        "phases": {phase: _phase_row(part) for phase in PHASES if len(part := forwards[forwards["phase"] == phase])},
        "unlabelled": {
            "forwards": int(len(unknown)),
            "why": {str(note): int(n) for note, n in unknown["note"].value_counts().items()},
        },
    }
