"""Evidence that later findings cite: every idle window of a step with the kernels on both sides,
and one index that resolves each evidence id to rank, rows, time window and source file."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.io import json_text, text_of_path
from npuprof.pipeline.sources.discovery import RankInput


def source_path_of(rank: RankInput, source_id: str | None) -> str | None:
    """The file an event's ``source_id`` (``r<rank>:<kind>[:<index>]``) names, from the rank's inputs."""
    if not source_id:
        return None
    _, kind, *index = str(source_id).split(":")
    number = int(index[0]) if index else 0
    if kind == "kernel_details_csv":
        return rank.kernel_csv
    candidates = rank.profiler_dbs if kind == "profiler_db" else rank.op_summary_csvs
    return candidates[number] if number < len(candidates) else None


def bubble_windows(rank_id: int, events: pd.DataFrame, idle_gaps: pd.DataFrame, steps: pd.DataFrame, min_ns: int):
    """Idle gaps of at least ``min_ns`` with their evidence id and the kernels that bracket them."""
    gaps = idle_gaps[(idle_gaps["end_ns"] - idle_gaps["start_ns"]) >= min_ns].reset_index(drop=True)
    before = events.iloc[gaps["before_pos"].to_numpy()]
    after = events.iloc[gaps["after_pos"].to_numpy()]
    index_in_step = gaps.groupby("step_ordinal").cumcount().to_numpy()
    ordinals = gaps["step_ordinal"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "evidence_id": [f"r{rank_id}.step{s}.bubble{k}" for s, k in zip(ordinals, index_in_step)],
            "step_ordinal": ordinals,
            "step_id": steps.set_index("step_ordinal")["step_id"].reindex(ordinals).to_numpy(),
            "kind": gaps["window"].to_numpy(),
            "start_ns": gaps["start_ns"].to_numpy(),
            "end_ns": gaps["end_ns"].to_numpy(),
            "duration_us": (gaps["end_ns"] - gaps["start_ns"]).to_numpy() / 1000.0,
            "before_name": before["name"].to_numpy(),
            "before_row": before["row_idx"].to_numpy(),
            "after_name": after["name"].to_numpy(),
            "after_row": after["row_idx"].to_numpy(),
            "source_id": before["source_id"].to_numpy(),
        }
    )


def evidence_index(rank: RankInput, steps: pd.DataFrame, bubbles: pd.DataFrame, source_id: str | None) -> pd.DataFrame:
    """One row per evidence id of the rank: its steps' windows and its bubble windows."""
    step_rows = pd.DataFrame(
        {
            "evidence_id": [f"r{rank.rank_id}.step{s}" for s in steps["step_ordinal"]],
            "kind": "step_window",
            "step_ordinal": steps["step_ordinal"].to_numpy(),
            "row_start": steps["row_start"].to_numpy(),
            "row_end": steps["row_end"].to_numpy(),
            "start_us": steps["start_ns"].to_numpy() / 1000.0,
            "end_us": steps["end_ns"].to_numpy() / 1000.0,
            "source_id": source_id,
            "summary": [
                f"step {s} ({'complete' if c else 'partial'})" for s, c in zip(steps["step_id"], steps["complete"])
            ],
        }
    )
    bubble_rows = pd.DataFrame(
        {
            "evidence_id": bubbles["evidence_id"],
            "kind": "bubble_window",
            "step_ordinal": bubbles["step_ordinal"],
            "row_start": np.minimum(bubbles["before_row"], bubbles["after_row"]),
            "row_end": np.maximum(bubbles["before_row"], bubbles["after_row"]),
            "start_us": bubbles["start_ns"] / 1000.0,
            "end_us": bubbles["end_ns"] / 1000.0,
            "source_id": bubbles["source_id"],
            "summary": [
                f"{d:.1f} us {k} idle between {b} and {a}"
                for d, k, b, a in zip(
                    bubbles["duration_us"], bubbles["kind"], bubbles["before_name"], bubbles["after_name"]
                )
            ],
        }
    )
    index = pd.concat([step_rows, bubble_rows], ignore_index=True) if len(bubble_rows) else step_rows
    index["source_path"] = [text_of_path(source_path_of(rank, s)) for s in index["source_id"]]
    return index


def bubble_windows_jsonl(bubbles: pd.DataFrame) -> str:
    """evidence/bubble_windows.jsonl: one record per idle window (``soft_attribution`` is filled by
    the host-trace attribution of a later stage; null until then)."""
    lines = []
    for row in bubbles.itertuples(index=False):  # a loop over idle windows, not events
        lines.append(
            json_text(
                {
                    "evidence_id": row.evidence_id,
                    "rank_id": int(row.rank_id),
                    "step_ordinal": int(row.step_ordinal),
                    "step_id": None if pd.isna(row.step_id) else int(row.step_id),
                    "kind": row.kind,
                    "start_us": row.start_ns / 1000.0,
                    "end_us": row.end_ns / 1000.0,
                    "duration_us": row.duration_us,
                    "before_event": {"name": row.before_name, "row_idx": int(row.before_row)},
                    "after_event": {"name": row.after_name, "row_idx": int(row.after_row)},
                    "soft_attribution": None,
                }
            )
        )
    return "\n".join(lines) + ("\n" if lines else "")
