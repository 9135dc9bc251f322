"""aicore_freq_throttled: a card whose AI Core clock ran below nominal while it worked.

The frequency is a step function (each sample holds until the next). The nominal clock is the
chosen hardware profile's (``hardware_insights.json``) when the SoC is known, else the highest
sample of the capture (every card of one job is one SoC). A kernel that starts while its card is
throttled runs ``nominal / freq`` times longer for the same cycles, so the time lost is
``duration × (1 − freq / nominal)`` summed over those kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from npuprof.pipeline import io, schema
from npuprof.pipeline.evidence_ids import step_evidence_id
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.kernel_categories import AICORE_OP_TYPES
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.rank_kernels import step_spans
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import close_windows

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

# compute on AI cores: a communication task waits as long at any clock
CLOCKED_OP_TYPES = [t for t in AICORE_OP_TYPES if t != "mix_comm_aiv"]
FINDING = "aicore_freq_throttled"


def nominal_clock(hardware: dict, samples: pd.DataFrame) -> tuple[float | None, str]:
    """(nominal MHz, where it comes from): the chosen SoC's clock, else the capture's highest sample."""
    clock = (hardware.get("facts") or {}).get("cube_freq_mhz")
    if clock and hardware.get("name"):
        return float(clock), f"{hardware['name']} clock"
    if len(samples):
        return float(samples["freq_mhz"].max()), "the highest clock of the capture"
    return None, "no frequency samples"


def sample_intervals(samples: pd.DataFrame, spans: pd.DataFrame) -> pd.DataFrame:
    """Each sample as an interval [start_ns, end_ns) clipped to its rank's steps (``spans``: rank_id,
    start_ns, end_ns); the last sample of a rank holds until the rank's last step ends."""
    ordered = samples.sort_values(["rank_id", "timestamp_ns"], kind="stable")
    span = spans.set_index("rank_id").reindex(ordered["rank_id"])
    following = ordered.groupby("rank_id")["timestamp_ns"].shift(-1)
    end = following.fillna(pd.Series(span["end_ns"].to_numpy(), index=ordered.index))
    frame = ordered.assign(
        start_ns=np.maximum(ordered["timestamp_ns"].to_numpy(), span["start_ns"].to_numpy()),
        end_ns=np.minimum(end.to_numpy(), span["end_ns"].to_numpy()),
    )
    return frame[frame["end_ns"] > frame["start_ns"]].reset_index(drop=True)


def throttled_intervals(samples: pd.DataFrame, spans: pd.DataFrame, hardware: dict) -> pd.DataFrame:
    """Intervals inside the ranks' steps where the clock ran below the rule's share of nominal."""
    nominal, _ = nominal_clock(hardware, samples)
    if nominal is None or samples.empty or spans.empty:
        return pd.DataFrame(columns=["rank_id", "start_ns", "end_ns", "freq_mhz", "source_id", "source_row"])
    intervals = sample_intervals(samples, spans)
    return intervals[intervals["freq_mhz"] < rule(FINDING)["freq_ratio_max"] * nominal].reset_index(drop=True)


@derived_input("throttled_kernels")
def throttled_kernels(ctx: RootContext) -> pd.DataFrame:
    """AI Core kernels that started while their card was throttled: rank_id, name, start_ns, duration_ns,
    freq_mhz."""
    columns = ["rank_id", "name", "start_ns", "duration_ns", "freq_mhz"]
    if not (ctx.out_dir / schema.AICORE_FREQ).exists():
        return pd.DataFrame(columns=columns)
    samples = int_ranks(ctx.read_frame(schema.AICORE_FREQ))
    steps = int_ranks(ctx.read_table(schema.STEP_SEGMENTS, columns=["start_ns", "end_ns"]).to_pandas())
    hardware = io.read_json_or_empty(ctx.out_dir / schema.HARDWARE_INSIGHTS)
    windows = throttled_intervals(samples, step_spans(steps), hardware)
    parts = []
    for rank, own in windows.groupby("rank_id"):  # a loop over throttled ranks
        events = ctx.read_table(
            schema.NORMALIZED_EVENTS,
            columns=["name", "op_type", "start_ns", "duration_ns"],
            filter=(pc.field("rank_id") == int(rank))
            & pc.field("op_type").isin(CLOCKED_OP_TYPES)
            & (pc.field("start_ns") >= int(own["start_ns"].min()))
            & (pc.field("start_ns") < int(own["end_ns"].max())),
        ).to_pandas()
        starts = own["start_ns"].to_numpy()
        slot = np.searchsorted(starts, events["start_ns"].to_numpy(), side="right") - 1
        inside = (slot >= 0) & (events["start_ns"].to_numpy() < own["end_ns"].to_numpy()[np.maximum(slot, 0)])
        chosen = events[inside]
        parts.append(
            pd.DataFrame(
                {
                    "rank_id": int(rank),
                    "name": chosen["name"].to_numpy(),
                    "start_ns": chosen["start_ns"].to_numpy(),
                    "duration_ns": chosen["duration_ns"].to_numpy(),
                    "freq_mhz": own["freq_mhz"].to_numpy()[slot[inside]],
                }
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def _freq_at(samples: pd.DataFrame, times: np.ndarray) -> float | None:
    """The median over ``samples``' ranks of each rank's clock at ``times`` (None without samples)."""
    values = []
    for _, own in samples.groupby("rank_id"):  # a loop over peer ranks
        own = own.sort_values("timestamp_ns")
        slot = np.searchsorted(own["timestamp_ns"].to_numpy(), times, side="right") - 1
        values.extend(own["freq_mhz"].to_numpy()[slot[slot >= 0]])
    return float(np.median(values)) if values else None


@detector(
    finding_types=(FINDING,),
    reads={
        "freq_samples": ("rank_id", "timestamp_ns", "freq_mhz", "source_id", "source_row"),
        "steps": ("rank_id", "step_ordinal", "start_ns", "end_ns"),
        "hardware": (),
        "throttled_kernels": (),
        "operators": ("rank_id", "name", "evidence_id"),
        "step_model": (),
    },
)
def aicore_freq_throttled(inputs: DiagnosisContext) -> list[Finding]:
    """Ranks that ran throttled for at least the rule's time inside their steps."""
    spec, samples, steps = rule(FINDING), inputs.freq_samples, inputs.steps
    if samples.empty or steps.empty:
        return []
    nominal, nominal_from = nominal_clock(inputs.hardware, samples)
    windows = throttled_intervals(samples, step_spans(steps), inputs.hardware)
    findings = []
    for rank, own in windows.groupby("rank_id"):  # a loop over throttled ranks
        throttled_ms = float((own["end_ns"] - own["start_ns"]).sum()) / 1e6
        if throttled_ms < spec["min_throttled_ms"]:
            continue
        mine = steps[steps["rank_id"] == rank]
        findings.append(_finding(int(rank), own, mine, inputs, nominal, nominal_from, throttled_ms))
    return findings


def _overlapping_steps(steps: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    starts, ends = windows["start_ns"].to_numpy(), windows["end_ns"].to_numpy()
    first = np.searchsorted(ends, steps["start_ns"].to_numpy(), side="right")
    overlaps = (first < len(starts)) & (starts[np.minimum(first, len(starts) - 1)] < steps["end_ns"].to_numpy())
    return steps[overlaps]


def _finding(
    rank: int,
    windows: pd.DataFrame,
    steps: pd.DataFrame,
    inputs: DiagnosisContext,
    nominal: float,
    nominal_from: str,
    throttled_ms: float,
) -> Finding:
    spec = rule(FINDING)
    hit = _overlapping_steps(steps, windows)
    kernels = inputs.throttled_kernels
    kernels = kernels[kernels["rank_id"] == rank]
    extra_ns = kernels["duration_ns"].to_numpy(float) * (1.0 - kernels["freq_mhz"].to_numpy(float) / nominal)
    extra = pd.DataFrame({"rank_id": rank, "start_us": kernels["start_ns"] / 1000.0, "duration_us": extra_ns / 1000.0})
    top = kernels.assign(extra=extra_ns).groupby("name")["extra"].sum().sort_values(ascending=False).head(4)
    ops = inputs.operators[(inputs.operators["rank_id"] == rank) & inputs.operators["name"].isin(top.index)]
    middles = ((windows["start_ns"] + windows["end_ns"]) // 2).to_numpy()
    peer_mhz = _freq_at(inputs.freq_samples[inputs.freq_samples["rank_id"] != rank], middles)
    weights = (windows["end_ns"] - windows["start_ns"]).to_numpy(float)
    freq = float(np.average(windows["freq_mhz"], weights=weights))
    rows = ", ".join(f"{s}:{r}" for s, r in windows[["source_id", "source_row"]].head(3).itertuples(index=False))
    return Finding(
        finding_type=FINDING,
        scope="rank",
        rank_ids=[rank],
        evidence_ids=[step_evidence_id(rank, o) for o in hit["step_ordinal"]] + ops["evidence_id"].tolist(),
        statistic={
            "name": "freq_over_nominal",
            "value": float(windows["freq_mhz"].min()) / nominal,
            "threshold": spec["freq_ratio_max"],
        },
        values={
            "rank": rank,
            "freq_mhz": freq,
            "ratio": freq / nominal,
            "nominal_mhz": nominal,
            "nominal_from": nominal_from,
            "throttled_ms": throttled_ms,
            "step_count": len(hit),
            "step_total": len(steps),
            "peers": "no peer rank has samples" if peer_mhz is None else f"its peers ran at {peer_mhz:.0f} MHz",
            "kernel_count": len(kernels),
            "extra_ms": float(extra_ns.sum()) / 1e6,
            "kernels": ", ".join(top.index.astype(str)),
            "samples": rows,
        },
        limitations=[f"frequency samples {rows}: each holds until the next sample"],
        # the card at nominal clock: each throttled kernel loses its extra time, replayed
        **priced(inputs.step_model, close_windows(inputs.step_model, extra, kernels=True)),
    )
