"""The serving view in report.md: forwards by phase (model's serving view, forward_summary.csv)."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.mdtext import cell, table

COLUMNS = [
    "phase",
    "forwards",
    "requests_mean",
    "tokens",
    "padded_tokens",
    "wall_p50_ms",
    "wall_p90_ms",
    "wall_p99_ms",
    "device_us_per_token",
    "gap_before_p50_ms",
]


def serving_markdown(serving: dict | None) -> str:
    """The forwards of an inference capture by phase, and what could not be labelled; "" for training."""
    if not serving:
        return ""
    rows = pd.DataFrame([{"phase": phase, **row} for phase, row in serving["phases"].items()])
    text = (
        f"Forwards by phase ({serving['forwards']} forwards over {serving['ranks']} ranks; each forward's "
        "batch read from its attention calls' input shapes; one row per forward in forward_summary.csv). "
        "Wall is the device's, from the forward's first kernel to its last; the gap is the device's idle "
        "since the previous forward ended; padded tokens are what full graphs ran beyond the requests "
        "(– where it cannot be told):\n\n"
    )
    text += table(rows, COLUMNS) if len(rows) else "_no forward's batch could be read from its shapes_\n"
    unlabelled = serving["unlabelled"]
    if unlabelled["forwards"]:
        why = "; ".join(f"{cell(note)}: {n}" for note, n in unlabelled["why"].items())
        text += f"\n{unlabelled['forwards']} forwards are not labelled ({why}).\n"
    return text + "\n"
