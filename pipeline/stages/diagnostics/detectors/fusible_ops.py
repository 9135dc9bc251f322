"""fusible_op_sequence: short chains of AI Core / vector kernels, each reading what the one before it
wrote, that are memory-bound (their memory pipes take the most time, as summarize labels a kernel's
bound) and recur through the step.

The vendor's advisor asks the same of consecutive kernels (its fusible operator check); here a chain must
also be linked by data (a kernel's input has the shape and dtype of its predecessor's first output), and
it is priced: one fused kernel reads the chain's outside inputs once and writes its last result once, at
the chain's own bandwidth, and the gaps between its kernels close. Chains a named composite or an eager
loss covers are unfused_op_pattern's or unfused_loss_chain's and are not counted again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.distinct import combined_codes, distinct_rows, text_codes
from npuprof.pipeline.kernel_categories import AICORE_OP_TYPES
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, rule
from npuprof.pipeline.stages.diagnostics.kernel_traffic import TRAFFIC_COLUMNS, kernel_traffic, reads_previous_output
from npuprof.pipeline.stages.diagnostics.rank_kernels import in_start_order, scan_kernels_in_steps
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.step_scale import chain_claim, costly_chains, mean_step_wall_ms, steps_per_rank
from npuprof.pipeline.summaries.bound import pipe_family_codes

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

FINDING = "fusible_op_sequence"
# the tasks a chain is made of: AI Core / vector compute kernels (communication on the AI cores ends one)
COMPUTE_OP_TYPES = [op for op in AICORE_OP_TYPES if op != "mix_comm_aiv"]
SCAN_COLUMNS = ["name", "type", "op_type", "start_ns", "end_ns", *TRAFFIC_COLUMNS]
WINDOW_COLUMNS = [
    "rank_id",
    "pattern",
    "kernels",
    "first_name",
    "first",
    "length",
    "start_us",
    "span_us",
    "kernel_us",
    "pipe_us",
    "mte_us",
    "fused_us",
]


class SequenceWindows(NamedTuple):
    """Every memory-bound linked chain of every rank (WINDOW_COLUMNS: one row per chain and length, so
    they overlap), and the ranks whose capture has no pipe times to judge by."""

    windows: pd.DataFrame
    ranks_without_pipes: list[int]


@derived_input("sequence_windows")
def sequence_windows(ctx: RootContext) -> SequenceWindows:
    """The ranks' memory-bound linked chains inside their steps (device tasks in device order; a task that
    is not an AI Core / vector kernel ends a chain)."""
    spec = rule(FINDING)
    # the pipeline stages a kernel's bound is judged by, and their families (summary_rules.yaml)
    stages = knowledge.load("summary_rules")["bound"]["stages"]
    lengths = range(int(spec["min_length"]), int(spec["max_length"]) + 1)

    def scan(rank: int, events: pd.DataFrame) -> list[pd.DataFrame] | None:
        kernels = _per_kernel(in_start_order(events), stages, spec["memory_families"])
        if kernels is None:
            return None
        sums = _cumulative(kernels)  # once per rank, for every length
        return [_windows_of_length(kernels, length, sums).assign(rank_id=rank) for length in lengths]

    texts = tuple(column for column in SCAN_COLUMNS if column not in ("start_ns", "end_ns"))
    scanned = scan_kernels_in_steps(ctx, [*SCAN_COLUMNS, *stages], scan, op_types=None, dictionary=texts)
    unpiped = [rank for rank, found in scanned if found is None]
    parts = [part for _, found in scanned for part in found or []]
    parts = [part for part in parts if len(part)]
    windows = pd.concat(parts, ignore_index=True)[WINDOW_COLUMNS] if parts else pd.DataFrame(columns=WINDOW_COLUMNS)
    return SequenceWindows(windows, unpiped)


def _per_kernel(events: pd.DataFrame, stages: dict[str, str], memory_families: list[str]) -> dict | None:
    """Per task of a rank (device order), what a chain sums or checks; None when its kernels carry no
    pipe times (the capture was not taken with aic_metrics=PipeUtilization). ``stages``: the pipeline
    stage columns and their families. Shapes are read for the memory-bound kernels only: no other task
    can be in a chain."""
    kernel = np.flatnonzero(events["op_type"].isin(COMPUTE_OP_TYPES).to_numpy())
    # a kernel is memory-bound the way summarize labels it (bound_labels: a compute kernel's op type
    # overrides nothing): its memory pipes' family has the most time
    found = pipe_family_codes(_stage_times(events, list(stages), kernel))
    if not found.signal.any():
        return None
    memory = np.isin(found.names, memory_families)[found.code] & found.signal
    rows = kernel[memory]
    count = len(events)
    candidates = events[["name", *TRAFFIC_COLUMNS]].iloc[rows]
    traffic = kernel_traffic(candidates)
    known = ~traffic.isna().any(axis=1).to_numpy()  # a dtype the capture does not name: no traffic to price
    # linked: reads what the task just before it wrote (only a memory-bound predecessor can be in its chain)
    linked = reads_previous_output(candidates) & np.r_[False, np.diff(rows) == 1]
    names = text_codes(candidates["name"])[0]
    identity = combined_codes([candidates["name"], candidates["input_shapes"], candidates["output_shapes"]])[0]
    # summed a column after another, as pandas sums a frame's columns (NumPy's pairwise sum of a row would
    # round differently): an F-ordered array's row sums are
    pipes = np.asfortranarray(found.values[memory])
    mte = pipes[:, [i for i, family in enumerate(stages.values()) if family in memory_families]].sum(axis=1)

    def spread(values: np.ndarray, fill: float | int) -> np.ndarray:
        """``values`` of the candidates at their positions among the rank's tasks, ``fill`` elsewhere."""
        full = np.full(count, fill, dtype=np.asarray(values).dtype)
        full[rows] = values
        return full

    return {
        "breaks": spread(~known, True),
        "unlinked": spread(~linked, True),
        "same": spread(np.r_[False, names[1:] == names[:-1]] & linked, False),
        "kernel_us": (events["end_ns"] - events["start_ns"]).to_numpy() / 1000.0,
        "pipe_us": spread(pipes.sum(axis=1), 0.0),
        "mte_us": spread(mte, 0.0),
        "inputs": spread(traffic["input_bytes"].fillna(0.0).to_numpy(), 0.0),
        "outputs": spread(traffic["output_bytes"].fillna(0.0).to_numpy(), 0.0),
        "written": spread(traffic["first_output_bytes"].fillna(0.0).to_numpy(), 0.0),
        "code": spread(identity, -1),
        # texts stay Series (Arrow-backed or categorical): a label is made only for each distinct chain's first
        # occurrence, its type where the capture names one, else its name
        "type": events["type"],
        "name": events["name"],
        "start_ns": events["start_ns"].to_numpy(),
        "end_ns": events["end_ns"].to_numpy(),
    }


def _stage_times(events: pd.DataFrame, stages: list[str], rows: np.ndarray) -> np.ndarray:
    """The pipeline ``stages``' times of ``rows`` (NaN where not captured), F-ordered as pandas holds a frame's
    float columns: row sums then add them in the order pandas does."""
    times = np.empty((len(rows), len(stages)), order="F")
    for index, stage in enumerate(stages):  # a loop over the 9 stage columns
        times[:, index] = events[stage].to_numpy(dtype=float, na_value=np.nan)[rows]
    return times


def _cumulative(kernels: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The running sums of ``_SUMMED`` over a rank's tasks (a leading 0): any window's sum in two reads."""
    return {key: np.r_[0.0, np.cumsum(kernels[key], dtype=float)] for key in _SUMMED}


def _windows_of_length(
    kernels: dict[str, np.ndarray | pd.Series], length: int, sums: dict[str, np.ndarray]
) -> pd.DataFrame:
    """The chains of ``length`` memory-bound kernels: no break inside, each kernel reading its
    predecessor's output, not one kernel repeated (a batch, not a chain). ``sums``: ``_cumulative``
    of ``kernels``, computed once for every length."""
    count = len(kernels["code"]) - length + 1
    if count <= 0:
        return pd.DataFrame()

    def every_window(key: str, skip: int = 0) -> np.ndarray:
        """The sum of ``key`` over each window's kernels but its first ``skip``: slices, not gathers."""
        return sums[key][length : length + count] - sums[key][skip : skip + count]

    valid = (every_window("breaks") == 0) & (every_window("unlinked", 1) == 0) & (every_window("same", 1) < length - 1)
    first = np.flatnonzero(valid)
    last = first + length - 1
    if not len(first):
        return pd.DataFrame()
    kernel_us = _within(sums, "kernel_us", first, last)
    moved = _within(sums, "inputs", first, last) + _within(sums, "outputs", first, last)
    # a fused kernel reads every input no kernel of the chain wrote and writes the last kernel's results:
    # what each later kernel reads from its predecessor stays on chip
    needed = _within(sums, "inputs", first, last) - _within(sums, "written", first, last - 1) + kernels["outputs"][last]
    fused_us = kernel_us * needed / np.where(moved > 0, moved, np.nan)
    chains = np.lib.stride_tricks.sliding_window_view(kernels["code"], length)[first]
    distinct, pattern = distinct_rows(chains)
    positions = (first[distinct][:, None] + np.arange(length)).ravel()
    types = kernels["type"].iloc[positions].to_numpy(object)
    types = np.where(pd.isna(types), kernels["name"].iloc[positions].to_numpy(object), types)
    labels = [" → ".join(map(str, types[at : at + length])) for at in range(0, len(types), length)]
    return (
        pd.DataFrame(
            {
                "pattern": [f"{length}:{p}" for p in range(len(distinct))],
                "kernels": np.array(labels, dtype=object),
                "first_name": kernels["name"].iloc[first[distinct]].to_numpy(object),
            }
        )
        .iloc[pattern.reshape(-1)]
        .reset_index(drop=True)
        .assign(
            first=first,
            length=length,
            start_us=kernels["start_ns"][first] / 1000.0,
            span_us=(kernels["end_ns"][last] - kernels["start_ns"][first]) / 1000.0,
            kernel_us=kernel_us,
            pipe_us=_within(sums, "pipe_us", first, last),
            mte_us=_within(sums, "mte_us", first, last),
            fused_us=fused_us,
        )
        .dropna(subset=["fused_us"])
    )


_SUMMED = ("breaks", "unlinked", "same", "kernel_us", "pipe_us", "mte_us", "inputs", "outputs", "written")


def _within(sums: dict[str, np.ndarray], key: str, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The sum of ``key`` over positions lo..hi (empty where hi < lo: 0)."""
    return sums[key][hi + 1] - sums[key][lo]


def chosen_chains(windows: pd.DataFrame, covered: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per rank, the chains fusion would take, best first: the pattern whose occurrences save the most
    (at least ``min_occurrences`` of them, none overlapping its predecessor), its kernels then taken, up
    to ``top_patterns`` patterns; chains inside ``covered`` spans (rank_id, start_us, span_us) left out."""
    windows = windows.assign(saved_us=(windows["span_us"] - windows["fused_us"]).clip(lower=0.0))
    windows = windows[~_inside(windows, covered)]
    chosen = []
    for _rank, own in windows.groupby("rank_id", sort=True):  # a loop over ranks
        # patterns grouped by integer codes numbered in the texts' order: a tie goes to the same pattern
        own = own.assign(pattern_code=pd.factorize(own["pattern"], sort=True)[0])
        for _round in range(int(spec["top_patterns"])):  # a loop over the patterns taken
            best = _best_pattern(own, int(spec["min_occurrences"]))
            if best is None:
                break
            chosen.append(best.drop(columns="pattern_code"))
            own = own[~_overlaps(own, best)]
    return pd.concat(chosen, ignore_index=True) if chosen else windows.iloc[:0]


def _best_pattern(windows: pd.DataFrame, min_occurrences: int) -> pd.DataFrame | None:
    """The occurrences of the pattern that saves the most, each not overlapping the one before it
    (``windows`` with their ``pattern_code``; its previous occurrence: the row before it of its pattern)."""
    code, first = windows["pattern_code"].to_numpy(), windows["first"].to_numpy()
    order = np.argsort(code, kind="stable")
    follows = code[order[1:]] == code[order[:-1]]  # the same pattern's previous occurrence
    previous = np.full(len(code), np.nan)
    previous[order[1:][follows]] = first[order[:-1][follows]]
    kept = np.isnan(previous) | (first - previous >= windows["length"].to_numpy())
    occurrences = np.bincount(code[kept], minlength=int(code.max()) + 1 if len(code) else 0)
    saved = pd.Series(windows["saved_us"].to_numpy()[kept]).groupby(code[kept]).sum()  # pandas' compensated sum
    saved = saved[occurrences[saved.index] >= min_occurrences]
    if saved.empty or saved.max() <= 0:
        return None
    return windows[kept & (code == saved.idxmax())]


def _overlaps(windows: pd.DataFrame, taken: pd.DataFrame) -> np.ndarray:
    """Per window, whether it shares a kernel with one of ``taken`` (same rank)."""
    ends = np.sort(taken["first"].to_numpy() + taken["length"].to_numpy() - 1)
    starts = np.sort(taken["first"].to_numpy())
    first, last = windows["first"].to_numpy(), windows["first"].to_numpy() + windows["length"].to_numpy() - 1
    # a window overlaps some taken one when a taken one starts at or before its last kernel and ends at
    # or after its first: taken windows do not overlap each other, so their starts and ends sort alike
    at = np.searchsorted(starts, last, side="right") - 1
    return (at >= 0) & (ends[np.clip(at, 0, None)] >= first)


def _inside(windows: pd.DataFrame, covered: pd.DataFrame) -> np.ndarray:
    """Per window, whether it starts inside one of the ``covered`` spans of its rank."""
    inside = np.zeros(len(windows), dtype=bool)
    for rank, spans in covered.groupby("rank_id"):  # a loop over ranks
        mine = (windows["rank_id"] == rank).to_numpy()
        spans = spans.sort_values("start_us")
        starts, ends = spans["start_us"].to_numpy(), (spans["start_us"] + spans["span_us"]).to_numpy()
        at = np.searchsorted(starts, windows["start_us"].to_numpy()[mine], side="right") - 1
        inside[mine] = (at >= 0) & (windows["start_us"].to_numpy()[mine] <= ends[np.clip(at, 0, None)])
    return inside


@detector(
    finding_types=(FINDING,),
    reads={
        "sequence_windows": (),
        "unfused_chains": (),
        "loss_chains": (),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "operators": ("rank_id", "name", "evidence_id"),
        "step_model": (),
    },
)
def fusible_op_sequence(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per chain (its kernels' types) whose fusion saves the rule's share of the step."""
    spec, scan, steps = rule(FINDING), inputs.sequence_windows, inputs.steps
    if scan.ranks_without_pipes:
        inputs.not_judging(
            FINDING,
            f"ranks {', '.join(map(str, scan.ranks_without_pipes))} carry no pipe times (MTE2 / MTE3 per "
            "kernel): capture with aic_metrics=PipeUtilization (torch_npu's experimental_config) to judge them",
        )
    if scan.windows.empty or steps.empty:
        return []
    # a chain inside a composite or a loss another finding prices is that finding's
    covered = pd.concat([inputs.unfused_chains, inputs.loss_chains.chains], ignore_index=True)
    chains = chosen_chains(scan.windows, covered[["rank_id", "start_us", "span_us"]], spec)
    threshold_ms = spec["min_step_share"] * mean_step_wall_ms(steps)
    return [
        _finding(inputs, kernels, own, per_step, steps_per_rank(steps), threshold_ms)
        for kernels, own, per_step in costly_chains(chains, "kernels", steps, spec["min_step_share"])
    ]


def _finding(
    inputs: DiagnosisContext, kernels: str, own: pd.DataFrame, per_step: pd.DataFrame, steps: pd.Series, least_ms: float
) -> Finding:
    """The finding of one chain's occurrences (``own``; ``per_step``: per rank, saved, span and fused µs
    per step)."""
    claim, worded = chain_claim(inputs, own, per_step, steps)
    saved_ms = worded.pop("saved_ms")
    return Finding(
        finding_type=FINDING,
        scope="operator",
        statistic={"name": "fusible_ms_per_step", "value": saved_ms, "threshold": least_ms},
        values={
            "kernels": kernels,
            "length": int(own["length"].iloc[0]),
            **worded,
            "mte_share": float(own["mte_us"].sum() / own["pipe_us"].sum()),
        },
        limitations=[
            "the fused kernel's time is estimated from the traffic it would still move at the chain's own "
            "bandwidth; whether the chain can be fused (a custom or graph-fused kernel) is for its author to judge"
        ],
        **claim,  # each chain shortened to the fused kernel's time, the steps replayed
    )
