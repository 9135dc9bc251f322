"""unfused_op_pattern: composites (RmsNorm, SwiGLU, softmax attention, rotary embedding written as tensor
arithmetic) that run as a chain of kernels where one fused Ascend kernel exists.

A chain is found as consecutive kernel types on a rank (``patterns`` in the rules); it is priced as its
span minus the fused kernel's time — measured where the rank runs the fused kernel on the same input
shape, else the chain's kernel time scaled by the traffic the fused kernel still moves.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from npuprof.pipeline.distinct import text_codes
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, rule
from npuprof.pipeline.stages.diagnostics.kernel_traffic import TRAFFIC_COLUMNS, kernel_traffic
from npuprof.pipeline.stages.diagnostics.rank_kernels import in_start_order, op_types, scan_kernels_in_steps
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.step_scale import chain_claim, costly_chains, mean_step_wall_ms, steps_per_rank

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

FINDING = "unfused_op_pattern"
CHAIN_INPUT_COLUMNS = ["name", "type", "start_ns", "end_ns", *TRAFFIC_COLUMNS]
CHAIN_COLUMNS = [
    "rank_id",
    "pattern",
    "kernels",
    "first_name",
    "start_us",
    "span_us",
    "kernel_us",
    "fused_us",
    "priced_by",
]
MEASURED, TRAFFIC = "measured", "traffic"


def pattern_variants(sequence: list[str]) -> list[list[frozenset[str]]]:
    """Every way a pattern's optional kernels can be present, longest first: per position the types it
    accepts."""
    positions = [(frozenset(p.removesuffix("?").split("|")), p.endswith("?")) for p in sequence]
    choices = [(True, False) if optional else (True,) for _, optional in positions]
    variants = [[types for (types, _), keep in zip(positions, kept) if keep] for kept in itertools.product(*choices)]
    return sorted(variants, key=len, reverse=True)


def chain_starts(types: np.ndarray, patterns: dict[str, dict]) -> list[tuple[str, int, int]]:
    """(pattern, first position, length) of every chain in ``types`` (a rank's kernel types in device
    order), no kernel in two chains: each variant's matches found with one comparison per position."""
    taken = np.zeros(len(types), dtype=bool)
    found = []
    codes, uniques = text_codes(types)
    accepting: dict[frozenset[str], np.ndarray] = {}  # per accepted set, where a type it accepts runs

    def accepts(accepted: frozenset[str]) -> np.ndarray:
        if accepted not in accepting:
            accepting[accepted] = np.isin(codes, [code for code, text in enumerate(uniques) if text in accepted])
        return accepting[accepted]

    for name, spec in patterns.items():
        for variant in pattern_variants(spec["sequence"]):
            width = len(variant)
            if len(types) < width:
                continue
            span = len(types) - width + 1
            match = np.ones(span, dtype=bool)
            for offset, accepted in enumerate(variant):
                match &= accepts(accepted)[offset : offset + span] & ~taken[offset : offset + span]
            for start in np.flatnonzero(match):  # a loop over matches (a few per layer), not events
                if not taken[start : start + width].any():
                    taken[start : start + width] = True
                    found.append((name, int(start), width))
    return found


@derived_input("unfused_chains")
def unfused_chains(ctx: RootContext) -> pd.DataFrame:
    """Every chain of every rank inside its steps, with its span, kernel time and the fused kernel's
    time (measured or from traffic): CHAIN_COLUMNS."""
    patterns = rule(FINDING)["patterns"]

    def scan(rank: int, kernels: pd.DataFrame) -> pd.DataFrame:
        return _rank_chains(rank, in_start_order(kernels), patterns)

    parts = [chains for _, chains in scan_kernels_in_steps(ctx, CHAIN_INPUT_COLUMNS, scan)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CHAIN_COLUMNS)


def _rank_chains(rank: int, events: pd.DataFrame, patterns: dict[str, dict]) -> pd.DataFrame:
    types = op_types(events)
    chains = chain_starts(types, patterns)
    if not chains:
        return pd.DataFrame(columns=CHAIN_COLUMNS)
    # the bytes of the chains' kernels only: the rest of the rank's kernels are never priced by traffic
    inputs, rest, outputs = (np.full(len(events), np.nan) for _ in range(3))
    rows = np.concatenate([np.arange(first, first + width) for _, first, width in chains])
    traffic = kernel_traffic(events.iloc[rows])
    inputs[rows], rest[rows], outputs[rows] = (
        traffic[k].to_numpy() for k in ("input_bytes", "later_input_bytes", "output_bytes")
    )
    start, end = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    duration = (end - start) / 1000.0
    shape_codes, shapes = text_codes(events["input_shapes"])
    leading = np.array([shape.split(";")[0] for shape in shapes], dtype=object)[shape_codes]  # distinct shapes
    # per pattern, the fused kernel's median time on each leading input shape the rank runs it on
    fused_medians = {}
    for name in {name for name, _, _ in chains}:  # a loop over the patterns found
        runs = np.isin(types, patterns[name]["fused"])
        fused_medians[name] = pd.Series(duration[runs]).groupby(leading[runs]).median().to_dict()
    rows = []
    for name, first, width in chains:  # a loop over chains
        last = first + width - 1
        kernel_us = float(duration[first : last + 1].sum())
        measured = fused_medians[name].get(leading[first])
        if measured is not None:
            fused_us, how = float(measured), MEASURED
        else:  # a fused kernel reads the chain's outside operands once and writes its result once
            moved = inputs[first : last + 1].sum() + outputs[first : last + 1].sum()
            needed = inputs[first] + rest[last] + outputs[last]
            fused_us, how = kernel_us * float(needed / moved) if moved > 0 else np.nan, TRAFFIC
        rows.append(
            {
                "rank_id": rank,
                "pattern": name,
                "kernels": " → ".join(map(str, types[first : last + 1])),
                "first_name": events["name"].iloc[first],
                "start_us": start[first] / 1000.0,
                "span_us": (end[last] - start[first]) / 1000.0,
                "kernel_us": kernel_us,
                "fused_us": fused_us,
                "priced_by": how,
            }
        )
    return pd.DataFrame(rows, columns=CHAIN_COLUMNS).dropna(subset=["fused_us"])


@detector(
    finding_types=(FINDING,),
    reads={
        "unfused_chains": (),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "operators": ("rank_id", "name", "evidence_id"),
        "step_model": (),
    },
)
def unfused_op_pattern(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per pattern whose chains cost the rule's share of the step, over the ranks that run them."""
    spec, chains, steps = rule(FINDING), inputs.unfused_chains, inputs.steps
    if chains.empty or steps.empty:
        return []
    chains = chains.assign(saved_us=(chains["span_us"] - chains["fused_us"]).clip(lower=0.0))
    threshold_ms = spec["min_step_share"] * mean_step_wall_ms(steps)
    return [
        _finding(inputs, pattern, own, per_step, steps_per_rank(steps), threshold_ms)
        for pattern, own, per_step in costly_chains(chains, "pattern", steps, spec["min_step_share"])
    ]


def _finding(
    inputs: DiagnosisContext, pattern: str, own: pd.DataFrame, per_step: pd.DataFrame, steps: pd.Series, least_ms: float
) -> Finding:
    """The finding of one pattern's chains (``own``; ``per_step``: per rank, their saved, span and fused µs
    per step)."""
    spec = rule(FINDING)
    claim, worded = chain_claim(inputs, own, per_step, steps)
    saved_ms = worded.pop("saved_ms")
    measured = own["priced_by"].mode().iloc[0] == MEASURED
    kernels = own["kernels"].mode().iloc[0]
    return Finding(
        finding_type=FINDING,
        scope="operator",
        statistic={"name": "unfused_ms_per_step", "value": saved_ms, "threshold": least_ms},
        values={
            "pattern": pattern,
            "kernels": kernels,
            "length": kernels.count("→") + 1,
            "fused": "/".join(spec["patterns"][pattern]["fused"]),
            **worded,
            "priced_by": "the fused kernel measured on the same input shape"
            if measured
            else "from the memory traffic a fused kernel still moves, at the chain's own bandwidth",
        },
        limitations=[] if measured else ["the fused kernel's time is estimated from its traffic, not measured"],
        **claim,  # each chain shortened to the fused kernel's time, the steps replayed
    )
