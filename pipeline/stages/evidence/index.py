"""Evidence that later findings cite: every idle window of a step with the kernels on both sides,
and one index that resolves each evidence id to rank, rows, time window and source file."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline.evidence_ids import STEP_ORDINAL, texts
from npuprof.pipeline.io import text_of_path
from npuprof.pipeline.jsonlines import NullableRecord, jsonl_bytes
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
    bracketing = events[["name", "row_idx", "source_id"]]  # take only the columns the windows keep
    before = bracketing.iloc[gaps["before_pos"].to_numpy()]
    after = bracketing.iloc[gaps["after_pos"].to_numpy()]
    index_in_step = gaps.groupby("step_ordinal").cumcount().to_numpy()
    ordinals = gaps["step_ordinal"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "evidence_id": texts(f"r{rank_id}{STEP_ORDINAL}", ordinals, ".bubble", index_in_step),
            "step_ordinal": ordinals,
            "step_id": steps.set_index("step_ordinal")["step_id"].reindex(ordinals).to_numpy(),
            "kind": gaps["window"].to_numpy(),
            "start_ns": gaps["start_ns"].to_numpy(),
            "end_ns": gaps["end_ns"].to_numpy(),
            "duration_us": (gaps["end_ns"] - gaps["start_ns"]).to_numpy() / 1000.0,
            "before_name": before["name"].array,
            "before_row": before["row_idx"].to_numpy(),
            "after_name": after["name"].array,
            "after_row": after["row_idx"].to_numpy(),
            "source_id": before["source_id"].array,
        }
    )


def _step_rows(rank_id: int, steps: pd.DataFrame) -> pd.DataFrame:
    complete = np.where(steps["complete"].to_numpy(bool), " (complete)", " (partial)")
    return pd.DataFrame(
        {
            "evidence_id": texts(f"r{rank_id}{STEP_ORDINAL}", steps["step_ordinal"].to_numpy(np.int64)),
            "kind": "step_window",
            "step_ordinal": steps["step_ordinal"].to_numpy(),
            "row_start": steps["row_start"].to_numpy(),
            "row_end": steps["row_end"].to_numpy(),
            "start_us": steps["start_ns"].to_numpy() / 1000.0,
            "end_us": steps["end_ns"].to_numpy() / 1000.0,
            "summary": texts("step ", steps["step_id"].astype("Int64").astype(object).fillna("?").to_numpy(), complete),
        }
    )


def _bubble_rows(bubbles: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "evidence_id": bubbles["evidence_id"],
            "kind": "bubble_window",
            "step_ordinal": bubbles["step_ordinal"],
            "row_start": np.minimum(bubbles["before_row"], bubbles["after_row"]),
            "row_end": np.maximum(bubbles["before_row"], bubbles["after_row"]),
            "start_us": bubbles["start_ns"] / 1000.0,
            "end_us": bubbles["end_ns"] / 1000.0,
            "summary": texts(
                np.round(bubbles["duration_us"].to_numpy(np.float64), 1),
                " us ",
                bubbles["kind"].astype(object).to_numpy(),
                " idle between ",
                bubbles["before_name"].astype(object).fillna("?").to_numpy(),
                " and ",
                bubbles["after_name"].astype(object).fillna("?").to_numpy(),
            ),
        }
    )


def _operator_rows(operators: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "evidence_id": operators["evidence_id"],
            "kind": "operator",
            "step_ordinal": None,
            "row_start": operators["row_start"],
            "row_end": operators["row_end"],
            "start_us": operators["first_start_us"],
            "end_us": operators["last_end_us"],
            "summary": texts(
                operators["name"].astype(object).fillna("?").to_numpy(),
                ": ",
                operators["call_count"].to_numpy(np.int64),
                " calls, ",
                np.round(operators["duration_sum_us"].to_numpy(np.float64), 1),
                " us (rows: first and last call)",
            ),
        }
    )


def _communication_rows(comm: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "evidence_id": comm["evidence_id"],
            "kind": "communication_op",
            "step_ordinal": comm["step_ordinal"],
            "row_start": comm["row_idx"],
            "row_end": comm["row_idx"],
            "start_us": comm["start_ns"] / 1000.0,
            "end_us": comm["end_ns"] / 1000.0,
            "summary": texts(
                comm["name"].astype(object).fillna("?").to_numpy(),
                " (",
                comm["parallel_role"].astype(object).fillna("unknown role").to_numpy(),
                "), ",
                np.round(comm["duration_us"].to_numpy(np.float64), 1),
                " us",
            ),
        }
    )


def evidence_index(
    rank: RankInput,
    source_id: str | None,
    steps: pd.DataFrame,
    bubbles: pd.DataFrame,
    operators: pd.DataFrame,
    communication: pd.DataFrame,
) -> pd.DataFrame:
    """One row per evidence id of the rank: step and bubble windows, operators, communication ops.

    All rows of a rank point into its one kernel source (``source_id``)."""
    parts = [
        builder(frame)
        for builder, frame in (
            (_bubble_rows, bubbles),
            (_operator_rows, operators),
            (_communication_rows, communication),
        )
        if len(frame)
    ]
    if len(steps):
        parts.insert(0, _step_rows(rank.rank_id, steps))
    if not parts:
        return pd.DataFrame()
    index = pd.concat(parts, ignore_index=True)
    index["source_id"] = source_id
    index["source_path"] = text_of_path(source_path_of(rank, source_id))
    return index


def _text_column(values: pd.Series) -> pa.Array:
    return pa.array(values.astype(object).where(values.notna(), None).to_numpy(), pa.string())


def bubble_windows_jsonl(bubbles: pd.DataFrame) -> bytes:
    """evidence/bubble_windows.jsonl: one record per idle window; ``soft_attribution`` holds the
    candidate host causes where the rank has a host trace, and ``idle_cause`` the cause holding most
    of the window (stages/evidence/idle_causes.py); both null where it has none."""
    record = {
        "evidence_id": bubbles["evidence_id"],
        "rank_id": bubbles["rank_id"].to_numpy(np.int64),
        "step_ordinal": bubbles["step_ordinal"].to_numpy(np.int64),
        "step_id": bubbles["step_id"].astype("Int64"),
        "kind": bubbles["kind"],
        "start_us": bubbles["start_ns"].to_numpy(np.int64) / 1000.0,
        "end_us": bubbles["end_ns"].to_numpy(np.int64) / 1000.0,
        "duration_us": bubbles["duration_us"].to_numpy(np.float64),
        "before_event": {"name": bubbles["before_name"], "row_idx": bubbles["before_row"].to_numpy(np.int64)},
        "after_event": {"name": bubbles["after_name"], "row_idx": bubbles["after_row"].to_numpy(np.int64)},
        "soft_attribution": NullableRecord(
            {
                "soft_root_cause_labels": pc.split_pattern(_text_column(bubbles["soft_labels"]), "|"),
                "host_coverage": bubbles["host_coverage"].to_numpy(np.float64),
                "sync_overlap": bubbles["sync_overlap"].to_numpy(np.float64),
                "comm_overlap": bubbles["comm_overlap"].to_numpy(np.float64),
                "host_thread_count": bubbles["host_thread_count"].astype("Int64"),
                "host_events": pc.split_pattern(_text_column(bubbles["host_events"].fillna("")), ";"),
            },
            bubbles["soft_labels"].notna().to_numpy(),
        ),
        "idle_cause": NullableRecord(
            {"cause": bubbles["cause"], "share": bubbles["cause_share"].to_numpy(np.float64)},
            bubbles["cause"].notna().to_numpy(),
        ),
    }
    return jsonl_bytes(record, len(bubbles))
