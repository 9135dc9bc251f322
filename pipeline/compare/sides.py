"""One side of a comparison: the tables of one analyzed output dir that a comparison reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline import csv_formulas, io, schema
from npuprof.pipeline.distinct import combined_codes
from npuprof.pipeline.errors import UsageError
from npuprof.pipeline.summaries.communication import SPLIT_SOURCES

STEP_COLUMNS = [
    "rank_id",
    "step_ordinal",
    "step_id",
    "step_class_id",
    "complete",
    "wall_ms",
    "row_start",
    "row_end",
    "start_ns",
    "end_ns",
]


@dataclass
class Side:
    """Complete steps, their layers and blocks, operator shapes, communication, accounting, findings."""

    out_dir: Path
    steps: pd.DataFrame
    layers: pd.DataFrame
    blocks: pd.DataFrame
    operators: pd.DataFrame  # operator_shape_summary (per rank)
    operator_calls: pd.DataFrame  # per call: op key and duration_us (complete steps only)
    communication: pd.DataFrame  # communication_events (per call: kind, parallel_role, duration, wait)
    accounting: pd.DataFrame  # step_time_accounting of complete steps
    findings: list[dict]
    model: dict  # model_insights.json

    @property
    def step_count(self) -> int:
        """Complete rank-steps: per-step figures are totals divided by this."""
        return max(len(self.steps), 1)


def _csv(out_dir: Path, view: schema.CsvView) -> pd.DataFrame:
    path = out_dir / view.file
    return csv_formulas.read_csv_view(path) if path.exists() else pd.DataFrame(columns=list(view.columns))


def _in_complete_steps(frame: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    keys = steps[["rank_id", "step_ordinal"]]
    return frame.merge(keys, on=["rank_id", "step_ordinal"], how="inner")


def load_side(out_dir: str | Path) -> Side:
    """The tables of an ``npuprof analyze`` output dir that ran through the model stage (diagnostics optional)."""
    out = Path(out_dir)
    if not (out / schema.stage_manifest_name("model")).exists():
        raise UsageError(f"{out} holds no summarized npuprof analysis (run npuprof analyze on it first)")
    steps = _csv(out, schema.STEP_SUMMARY)
    steps = steps[steps["complete"].astype(bool)][STEP_COLUMNS].reset_index(drop=True)
    layers = _in_complete_steps(_csv(out, schema.LAYER_SUMMARY), steps)
    blocks = _in_complete_steps(_csv(out, schema.BLOCK_SUMMARY), steps)
    comm = pd.read_parquet(out / schema.COMMUNICATION_EVENTS) if (out / schema.COMMUNICATION_EVENTS).exists() else None
    if comm is None or comm.empty:
        comm = pd.DataFrame(columns=["rank_id", "step_ordinal", "kind", "parallel_role", "duration_us", "wait_us"])
    comm["rank_id"] = comm["rank_id"].astype(int)
    comm = _in_complete_steps(comm.dropna(subset=["step_ordinal"]).astype({"step_ordinal": int}), steps)
    comm = _transit_and_wait(out, comm, steps)
    accounting = _csv(out, schema.STEP_TIME_ACCOUNTING_CSV)
    accounting = accounting[accounting["complete"].astype(bool)]
    findings = io.read_json_or_empty(out / schema.DIAGNOSIS_FINDINGS).get("diagnosis_findings", [])
    return Side(
        out_dir=out,
        steps=steps,
        layers=layers,
        blocks=blocks,
        operators=_csv(out, schema.OPERATOR_SHAPES_CSV),
        operator_calls=_operator_calls(out, steps),
        communication=comm,
        accounting=accounting,
        findings=findings,
        model=io.read_json_or_empty(out / schema.MODEL_INSIGHTS),
    )


def _transit_and_wait(out: Path, comm: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Each call's time split into transmit and wait (µs), and where the split came from.

    communication.json times each op on each rank: transit (moving data) and wait (for the other
    members; a straggler shows as wait on everyone else). Without it the split is the kernel's:
    its duration minus the stream wait before it, which counts waiting for a late member as transmit.
    """
    comm = comm.assign(
        transmit_us=comm["duration_us"] - comm["wait_us"].fillna(0),
        member_wait_us=comm["wait_us"].fillna(0),
        split_source="kernel_duration",
    )
    if comm.empty or not (out / schema.COMMUNICATION_OPS.path).exists():
        return comm
    ops = io.read_dataset(
        out, schema.COMMUNICATION_OPS, columns=["step_id", "op_name", "source", "transit_ms", "wait_ms"]
    ).to_pandas()
    ops = ops[ops["source"].isin(SPLIT_SOURCES) & ops["transit_ms"].notna()]
    if ops.empty:
        return comm
    keys = ["rank_id", "step_id", "name"]
    ops = ops.rename(columns={"op_name": "name"}).astype({"rank_id": int}).drop_duplicates(keys)
    ids = steps[["rank_id", "step_ordinal", "step_id"]]
    timed = comm.merge(ids, on=["rank_id", "step_ordinal"], how="left").merge(ops, on=keys, how="left")
    found = timed["transit_ms"].notna().to_numpy()
    comm.loc[found, "transmit_us"] = timed.loc[found, "transit_ms"].to_numpy() * 1000.0
    comm.loc[found, "member_wait_us"] = timed.loc[found, "wait_ms"].fillna(0).to_numpy() * 1000.0
    comm.loc[found, "split_source"] = timed.loc[found, "source"].to_numpy()
    return comm


OPERATOR_KEY = ["name", "input_shapes", "output_shapes"]


KEY_SEPARATOR = "\x1f"


def _operator_calls(out: Path, steps: pd.DataFrame) -> pd.DataFrame:
    """Every compute call inside a complete step: rank, operator key (name, shapes joined) and µs.

    The key is one dictionary-encoded string, so grouping millions of calls works on integer codes.
    """
    from npuprof.pipeline.summaries.communication import COMMUNICATION_OP_TYPES

    table = io.read_dataset(
        out,
        schema.NORMALIZED_EVENTS,
        columns=[*OPERATOR_KEY, "op_type", "start_ns", "duration_ns"],
        dictionary=tuple(OPERATOR_KEY),
    )
    table = table.filter(pc.invert(pc.is_in(table["op_type"], pa.array(list(COMMUNICATION_OP_TYPES)))))
    spans = csv_formulas.read_csv_view(
        out / schema.STEP_SUMMARY.file, usecols=["rank_id", "step_ordinal", "start_ns", "end_ns"]
    )
    spans = spans.merge(steps[["rank_id", "step_ordinal"]], on=["rank_id", "step_ordinal"])
    ranks = table["rank_id"].to_numpy()
    starts = table["start_ns"].to_numpy()
    inside = np.zeros(len(starts), dtype=bool)
    for rank_id, windows in spans.groupby("rank_id"):  # ranks stay few
        mine = np.flatnonzero(ranks == rank_id)
        windows = windows.sort_values("start_ns")
        index = windows["start_ns"].searchsorted(starts[mine], side="right") - 1
        ends = windows["end_ns"].to_numpy()[index.clip(0)]
        inside[mine] = (index >= 0) & (starts[mine] < ends)
    table = table.filter(pa.array(inside))
    codes, names = _key_codes(table)
    return pd.DataFrame(
        {
            "rank_id": table["rank_id"].to_numpy(),
            "op_key": pd.Categorical.from_codes(codes, names),
            "duration_us": table["duration_ns"].to_numpy() / 1000.0,
        }
    )


def _key_codes(table: pa.Table) -> tuple[np.ndarray, list[str]]:
    """(key code per call, key strings in sorted order): each key column as dictionary codes, the codes
    combined as integers, strings built only for the distinct combinations."""
    inverse, distinct = combined_codes([table[column] for column in OPERATOR_KEY])
    names = [KEY_SEPARATOR.join(texts) for texts in distinct]  # one per distinct operator key
    order = np.argsort(np.array(names, dtype=object), kind="stable")  # keys in text order
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse], [names[i] for i in order]


def split_key(keys: pd.Series) -> pd.DataFrame:
    """The operator key back into name, input_shapes, output_shapes."""
    return keys.astype(str).str.split(KEY_SEPARATOR, n=2, expand=True, regex=False).set_axis(OPERATOR_KEY, axis=1)
