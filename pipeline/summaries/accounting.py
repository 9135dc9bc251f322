"""Where each step's wall time goes: compute by bound family, exposed communication by kind (and
by parallel role), compute-communication overlap, and idle time by anatomy window. The parts of the
primary breakdown add up to the step's wall time.

One sweep over every event boundary of the rank (all steps at once): between two consecutive
boundaries the set of running events is constant, so that stretch is idle, compute only,
communication only, or overlap. Compute-only time is shared among the compute events running then
in proportion to their count (two concurrent cube kernels split it), and the same for
communication kinds and roles, so every nanosecond is counted exactly once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.distinct import text_array
from npuprof.pipeline.segmentation.windows import window_positions
from npuprof.pipeline.summaries.gap_kinds import IDLE_BY_GAP, head_idle_name, idle_by_gap
from npuprof.pipeline.summaries.op_parts import COMM_PARTS

COMMUNICATION = "communication"


def _in_steps(events: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The ``columns`` of the events inside a step: a copy only when some event is outside every step
    (a selection of columns copies nothing)."""
    in_step = events["step_ordinal"].notna().to_numpy()
    return events[columns] if in_step.all() else events.loc[in_step, columns]


def _boundaries(inside: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every start (+1) and end (-1) of the events, ordered by step, time, ends first; and the event
    of each boundary. Ends before starts at one instant: touching kernels never overlap."""
    n = len(inside)
    step = np.concatenate([inside["step_ordinal"].to_numpy(np.int64)] * 2)
    time = np.concatenate([inside["start_ns"].to_numpy(np.int64), inside["end_ns"].to_numpy(np.int64)])
    sign = np.concatenate([np.ones(n), -np.ones(n)])
    order = np.lexsort((sign, time, step))
    return step[order], time[order], sign[order], np.concatenate([np.arange(n)] * 2)[order]


def _window_codes(
    stretch_step: np.ndarray, stretch_start: np.ndarray, layer_spans: pd.DataFrame
) -> tuple[np.ndarray, list[str]]:
    """The anatomy window (prelaunch / internal / tail) each stretch starts in, as int8 codes into the
    returned labels: a label per event boundary would be a text array of the boundaries' length."""
    rules = knowledge.load("summary_rules")
    names = rules["idle_by_window"]
    labels = [names["head"], names["main"], names["tail"], rules["idle_head_only"]]
    main = layer_spans.set_index("step_ordinal")
    main_start = main["main_start_ns"].reindex(stretch_step).to_numpy(float)
    main_end = main["main_end_ns"].reindex(stretch_step).to_numpy(float)
    codes = np.ones(len(stretch_start), dtype=np.int8)  # main
    codes[stretch_start >= main_end] = 2
    codes[stretch_start < main_start] = 0  # before the layers wins, as it is tested first
    codes[np.isnan(main_start)] = 3
    return codes, labels


def step_time_accounting(
    events: pd.DataFrame, steps: pd.DataFrame, layer_spans: pd.DataFrame, comm_parts: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Long table: per step, breakdown / category / component / ms / share. ``events``: step_ordinal
    (null outside steps), start_ns, end_ns, is_comm, bound_family, kind, parallel_role, op_type and
    block_kind (null outside blocks). ``steps``: step_ordinal, step_id, complete, start_ns, end_ns.
    ``layer_spans``: step_ordinal, main_start_ns, main_end_ns (the span of the step's layers).
    ``comm_parts``: per event (``events``' index), the transfer / wait / idle shares of its time
    (``communication_parts``); without it, exposed communication is not split by part."""
    columns = ["step_ordinal", "start_ns", "end_ns", "is_comm", "bound_family", "kind", "parallel_role", "op_type"]
    inside = _in_steps(events, columns + (["block_kind"] if "block_kind" in events else []))
    step, time, sign, event_of = _boundaries(inside)
    same_step = step[1:] == step[:-1]
    length = np.where(same_step, np.diff(time), 0).astype(float)

    def deltas(mask: np.ndarray) -> np.ndarray:
        """+1 / -1 at the boundaries of the events in ``mask`` (one value per boundary)."""
        return np.where(mask[event_of], sign, 0.0)

    is_comm = inside["is_comm"].to_numpy(bool)
    comm_active = np.cumsum(deltas(is_comm))[:-1]  # running after each boundary, for the stretch after it
    compute_active = np.cumsum(deltas(~is_comm))[:-1]
    compute_only = same_step & (compute_active > 0) & (comm_active == 0)
    comm_only = same_step & (comm_active > 0) & (compute_active == 0)
    # each row's stretches are summed per step as soon as they are known: a rank has tens of rows
    # and a stretch per event boundary, too many to hold every row's stretches at once
    position = np.searchsorted(steps["step_ordinal"].to_numpy(np.int64), step[:-1])
    stretches = _Stretches(position, length, event_of, sign, len(steps))
    rows: list[tuple[str, str, str, np.ndarray]] = []

    def add(breakdown: str, category: str, component: str, per_stretch: np.ndarray) -> None:
        rows.append((breakdown, category, component, np.bincount(position, weights=per_stretch, minlength=len(steps))))

    def split(breakdown: str, category: str, column, selector: np.ndarray, where: np.ndarray, total) -> None:
        # int codes: one compare per label, not per string
        codes, labels = pd.factorize(inside[column]) if isinstance(column, str) else column
        for code, per_step in _label_sums(codes, selector, where, total, stretches):
            rows.append((breakdown, category, str(labels[code] if code >= 0 else None), per_step))

    split("primary", "compute", "bound_family", ~is_comm, compute_only, compute_active)
    split("primary", COMMUNICATION, "kind", is_comm, comm_only, comm_active)
    overlap = same_step & (comm_active > 0) & (compute_active > 0)
    add("primary", "overlap", "compute+communication", np.where(overlap, length, 0.0))
    split("comm_by_role", COMMUNICATION, "parallel_role", is_comm, comm_only, comm_active)
    role_kind = _role_kind_codes(inside)  # one numbering for every role-kind split below
    split("comm_by_role_kind", COMMUNICATION, role_kind, is_comm, comm_only, comm_active)
    # the communication compute hid, by role and kind: what already overlaps (gradient_allreduce_exposed)
    split("comm_hidden_by_role_kind", COMMUNICATION, role_kind, is_comm, overlap, comm_active)
    split("compute_by_op_type", "compute", "op_type", ~is_comm, compute_only, compute_active)
    if "block_kind" in inside:
        split("compute_by_block", "compute", _block_codes(inside), ~is_comm, compute_only, compute_active)
    if comm_parts is not None:
        comm_share = np.where(comm_only, length / np.where(comm_active > 0, comm_active, 1), 0.0)
        rows += _exposed_parts(inside, role_kind, steps, comm_parts, comm_share, stretches, time, compute_active)
    idle = same_step & (comm_active == 0) & (compute_active == 0)
    return _per_step([*rows, *_idle_rows(inside, stretches, time, step, idle, layer_spans, steps)], steps)


def _idle_rows(
    inside: pd.DataFrame,
    stretches: _Stretches,
    time: np.ndarray,
    step: np.ndarray,
    idle: np.ndarray,
    layer_spans: pd.DataFrame,
    steps: pd.DataFrame,
) -> list[tuple[str, str, str, np.ndarray]]:
    """The idle rows per step: by anatomy window (primary) and by what each gap is (idle_by_gap), each
    with the head before the step's first event."""
    windows = _idle_windows(step, time, layer_spans)
    length, position = stretches.length, stretches.position

    def per_step(which: np.ndarray) -> np.ndarray:
        return np.bincount(position, weights=np.where(which, length, 0.0), minlength=stretches.step_count)

    rows = [("primary", "idle", name, per_step(idle & in_window)) for name, in_window in windows]
    gaps = idle_by_gap(inside, stretches.event_of, idle, length, windows)
    rows += [(IDLE_BY_GAP, "idle", name, per_step(which)) for name, which in gaps]
    head = ("idle", head_idle_name(steps), _head_ns(step, time, steps))
    return [*rows, ("primary", *head), (IDLE_BY_GAP, *head)]


class _Stretches(NamedTuple):
    """Stretches between boundaries: each one's step position and length, each boundary's event and sign."""

    position: np.ndarray
    length: np.ndarray
    event_of: np.ndarray
    sign: np.ndarray
    step_count: int


def _label_sums(
    codes: np.ndarray, selector: np.ndarray, where: np.ndarray, total: np.ndarray, stretches: _Stretches
) -> list[tuple[int, np.ndarray]]:
    """(label code, per step: Σ length × (active of the label / active in ``total``) over the stretches in
    ``where``) for each label of ``selector``'s events: over those it is active in only (the rest add exact 0)."""
    boundary_code = np.where(selector, codes, -2)[stretches.event_of]  # -2: not selected (-1: a null label)
    running, count, sums = np.where(total > 0, total, 1), len(stretches.length), []
    for code in np.unique(codes[selector]):  # a loop over labels
        mine = np.flatnonzero(boundary_code == code)  # the label's boundaries: its events' starts and ends
        active = np.cumsum(stretches.sign[mine], dtype=float)  # its events running from each boundary on
        held = active != 0  # the stretches from such a boundary to its next one (or the last) hold the label
        at, run = window_positions(mine[held], np.append(mine[1:], count)[held] - 1)
        counted = where[at]
        at, active = at[counted], active[held][run[counted]]
        weights = stretches.length[at] * active / running[at]
        sums.append((code, np.bincount(stretches.position[at], weights=weights, minlength=stretches.step_count)))
    return sums


def _first_boundaries(step: np.ndarray) -> np.ndarray:
    """Index of each step's first boundary (``_boundaries`` order): its first event's start."""
    return np.flatnonzero(np.concatenate([[True], step[1:] != step[:-1]]))


def _head_ns(step: np.ndarray, time: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Per step (``steps`` order): ns from its start to its first event."""
    firsts = _first_boundaries(step)
    first_start = pd.Series(time[firsts], index=step[firsts])
    heads = first_start.reindex(steps["step_ordinal"]).to_numpy(np.int64) - steps["start_ns"].to_numpy(np.int64)
    return np.clip(heads, 0, None).astype(float)


def _idle_windows(step: np.ndarray, time: np.ndarray, layer_spans: pd.DataFrame) -> list[tuple[str, np.ndarray]]:
    """(anatomy window name, which stretches lie in it) for each idle window of ``summary_rules``."""
    window, window_labels = _window_codes(step[:-1], time[:-1], layer_spans)
    chosen = []
    for name in knowledge.load("summary_rules")["idle_by_window"].values():
        codes = [code for code, label in enumerate(window_labels) if label == name]
        chosen.append((name, np.isin(window, codes)))
    return chosen


def idle_gaps(events: pd.DataFrame, layer_spans: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Every stretch of a step in which no event runs (the idle time of ``step_time_accounting``,
    found by the same sweep), in time order: step_ordinal, window (before the first event / prelaunch
    / internal / tail), start_ns, end_ns and the events on both sides (``before_pos`` ended at the
    gap's start — for the gap before a step's first event, the event before that —, ``after_pos``
    starts at its end; positions in ``events``).

    ``events``: step_ordinal (null outside steps), start_ns, end_ns, in device order; ``steps``:
    step_ordinal, start_ns (where the step starts: before its first event when the profiler says so).
    """
    inside = _in_steps(events, ["step_ordinal", "start_ns", "end_ns"])
    step, time, sign, event_of = _boundaries(inside)
    same_step = step[1:] == step[:-1]
    length = np.where(same_step, np.diff(time), 0)
    gaps = np.flatnonzero(same_step & (np.cumsum(sign)[:-1] == 0) & (length > 0))
    positions = np.flatnonzero(events["step_ordinal"].notna().to_numpy())[event_of]
    # a step's first boundary is its first event's start: the gap before it runs from the step's start
    firsts = _first_boundaries(step)
    first_pos = positions[firsts]
    step_start = steps.set_index("step_ordinal")["start_ns"].reindex(step[firsts]).to_numpy(np.int64)
    headed = step_start < time[firsts]
    window, labels = _window_codes(step[gaps], time[gaps], layer_spans)  # the anatomy window each gap starts in
    head_window = np.full(int(headed.sum()), len(labels))  # the code of head_idle_name(), after the labels
    frame = pd.DataFrame(
        {
            "step_ordinal": np.concatenate([step[gaps], step[firsts][headed]]),
            "window": text_array(np.concatenate([window, head_window]), [*labels, head_idle_name()]),
            "start_ns": np.concatenate([time[gaps], step_start[headed]]),
            "end_ns": np.concatenate([time[gaps + 1], time[firsts][headed]]),
            # the event before a step's first: the rank's previous step's last (none: the first itself)
            "before_pos": np.concatenate([positions[gaps], np.clip(first_pos[headed] - 1, 0, None)]),
            "after_pos": np.concatenate([positions[gaps + 1], first_pos[headed]]),
        }
    )
    return frame.sort_values(["step_ordinal", "start_ns"], kind="stable").reset_index(drop=True)


def _exposed_parts(
    inside: pd.DataFrame,
    role_kind: tuple[np.ndarray, list[str]],
    steps: pd.DataFrame,
    comm_parts: pd.DataFrame,
    comm_share: np.ndarray,
    stretches: _Stretches,
    time: np.ndarray,
    compute_active: np.ndarray,
) -> list[tuple[str, str, str, np.ndarray]]:
    """comm_exposed_parts rows: exposed communication by role, kind and part, per step.

    Each communication event's exposed ns are the comm-only stretches of its life, shared among the
    events communicating then (as the kind split shares them): the integral of ``comm_share`` (a
    stretch's length over the events communicating in it) between its start and end boundaries. An
    op waits for its peers before it moves data, so its transit is the end of its life: the exposed
    ns in that last stretch are its transfer, the rest its wait and idle (in their op's proportion).
    A collective overlapped by compute until its last member arrives is then exposed in transit, not
    in a wait its peers caused. Boundaries out of time order (steps overlapping) fall back to the op's
    proportions."""
    integral = np.concatenate([[0.0], np.cumsum(comm_share)])
    start_at, end_at = np.empty(len(inside), np.int64), np.empty(len(inside), np.int64)
    start_at[stretches.event_of[stretches.sign > 0]] = np.flatnonzero(stretches.sign > 0)
    end_at[stretches.event_of[stretches.sign < 0]] = np.flatnonzero(stretches.sign < 0)
    # only the communication events (a few in a thousand) are exposed communication: the rest are left out
    comm = np.flatnonzero(inside["is_comm"].to_numpy(bool))
    events, start_at, end_at = inside.iloc[comm], start_at[comm], end_at[comm]
    exposed = integral[end_at] - integral[start_at]
    shares = {part: comm_parts.loc[events.index, part].to_numpy(float) for part in COMM_PARTS}
    if len(time) > 1 and (np.diff(time) >= 0).all():
        # compute running at some point of the event's life: it was issued on another stream
        computing = np.concatenate([[0], np.cumsum(compute_active > 0)])
        under_compute = computing[np.minimum(end_at, len(computing) - 1)] > computing[start_at]
        shares = _transit_last(events, shares, exposed, integral, time, start_at, end_at, under_compute)
    event_step = np.searchsorted(steps["step_ordinal"].to_numpy(np.int64), events["step_ordinal"].to_numpy(np.int64))
    codes, labels = role_kind[0][comm], role_kind[1]  # every event's role-kind code (_role_kind_codes)
    rows = []
    for part in COMM_PARTS:
        share = shares[part]
        for code in np.unique(codes):  # a loop over a rank's few role-kind pairs
            chosen = (codes == code) & (share > 0)
            if chosen.any():
                name = f"{labels[code] if code >= 0 else 'unknown'} {part}"
                ms = np.bincount(event_step[chosen], weights=(exposed * share)[chosen], minlength=len(steps))
                rows.append(("comm_exposed_parts", COMMUNICATION, name, ms))
    return rows


def _transit_last(
    inside: pd.DataFrame,
    shares: dict[str, np.ndarray],
    exposed: np.ndarray,
    integral: np.ndarray,
    time: np.ndarray,
    start_at: np.ndarray,
    end_at: np.ndarray,
    under_compute: np.ndarray,
) -> dict[str, np.ndarray]:
    """Each event's part shares of its exposed ns, its transit taken as the last ``transfer`` share of
    its life: the exposed ns after the transit starts (``integral`` read there, pro rata within its
    stretch) are transfer, the rest wait and idle in their op's proportion; then an op queued behind
    waiting ops gives its exposed transfer back to their wait (``_queued_behind_waits``)."""
    ends = inside["end_ns"].to_numpy(np.int64)
    life = (ends - inside["start_ns"].to_numpy(np.int64)).astype(float)
    transit_from = ends - np.round(shares["transfer"] * life).astype(np.int64)  # ns since 1970: stay int
    at = np.clip(np.searchsorted(time, transit_from, side="right") - 1, start_at, end_at)
    stretch = np.minimum(at, len(time) - 2)
    span = np.diff(time).astype(float)[stretch]
    within = np.clip((transit_from - time[at]).astype(float) / np.where(span > 0, span, np.inf), 0.0, 1.0)
    before = integral[at] + np.where(at < end_at, np.diff(integral)[stretch] * within, 0.0)
    transfer = np.where(shares["transfer"] > 0, np.clip(integral[end_at] - before, 0.0, exposed), 0.0)
    rest = shares["wait"] + shares["idle"]
    transfer = np.where(rest > 0, transfer, shares["transfer"] * exposed)  # no wait, no idle: all transit
    transfer -= _queued_behind_waits(inside, transfer, rest * life, under_compute)
    safe_exposed, safe_rest = np.where(exposed > 0, exposed, 1.0), np.where(rest > 0, rest, 1.0)
    waiting = (exposed - transfer) / safe_exposed
    return {
        "transfer": transfer / safe_exposed,
        # a transit-only op's wait is what it owes the ops queued before it; an unsplit op has none
        "wait": np.where(
            rest > 0, waiting * shares["wait"] / safe_rest, np.where(shares["transfer"] > 0, waiting, 0.0)
        ),
        "idle": np.where(rest > 0, waiting * shares["idle"] / safe_rest, 0.0),
        "unsplit": shares["unsplit"],
    }


def _queued_behind_waits(
    inside: pd.DataFrame, transfer_ns: np.ndarray, waited_ns: np.ndarray, under_compute: np.ndarray
) -> np.ndarray:
    """Per event: the exposed transfer ns it owes to the waits of the ops queued before it.

    Ops of one parallel role run one after another; an op that starts as the one before it ends
    (within ``queued_gap_us``), in a chain of such ops where one ran beside its rank's compute
    (``under_compute``: the chain was issued on another stream, not by a compute stream waiting for
    each op), was pushed late by that op's wait for its peers, and by the waits before that. Had the
    peers been on time, its transit would have run that much earlier — under the compute that hid the
    others — so that much of its exposed transfer is the wait's. Along each run of queued ops, transfer
    is handed back greedily up to the waits before it:
    given_k = min(given_(k-1) + T_k, W_k) with W_k the waits before op k, which is
    cumT_k + min(0, min over j ≤ k of (W_j - cumT_j))."""
    comm = inside["is_comm"].to_numpy(bool) & (inside["parallel_role"].notna().to_numpy())
    owed = np.zeros(len(inside))
    if comm.sum() < 2:
        return owed
    gap_ns = float(knowledge.load("summary_rules")["queued_gap_us"]) * 1000.0
    ops = pd.DataFrame(
        {
            "role": inside["parallel_role"].to_numpy()[comm],
            "start": inside["start_ns"].to_numpy(np.int64)[comm],
            "end": inside["end_ns"].to_numpy(np.int64)[comm],
            "transfer": transfer_ns[comm],
            "waited": waited_ns[comm],
            "row": np.flatnonzero(comm),
        }
    ).sort_values(["role", "start"], kind="stable")
    role = ops["role"].to_numpy()
    start, end = ops["start"].to_numpy(), ops["end"].to_numpy()
    queued = np.zeros(len(ops), dtype=bool)
    queued[1:] = (role[1:] == role[:-1]) & (start[1:] - end[:-1] <= gap_ns) & (start[1:] >= end[:-1] - gap_ns)
    # from the first op of a back-to-back chain that ran beside compute on, the chain was on its own stream
    chain = np.cumsum(~queued)
    queued &= pd.Series(under_compute[ops["row"].to_numpy()]).groupby(chain).cummax().to_numpy()
    run = np.cumsum(~queued)  # a new run wherever an op is not queued behind the one before
    grouped = ops.assign(run=run).groupby("run", sort=False)
    waits_before = grouped["waited"].cumsum().to_numpy() - ops["waited"].to_numpy()
    cum_transfer = grouped["transfer"].cumsum().to_numpy()
    slack = pd.Series(waits_before - cum_transfer).groupby(run).cummin().to_numpy()
    given = cum_transfer + np.minimum(0.0, slack)
    previous = np.where(queued, np.concatenate([[0.0], given[:-1]]), 0.0)
    owed[ops["row"].to_numpy()] = np.clip(given - previous, 0.0, None)
    return owed


def _block_codes(inside: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Codes and labels of each event's block kind, events outside every block labelled as such."""
    outside = knowledge.load("summary_rules")["compute_outside_blocks"]
    codes, labels = pd.factorize(inside["block_kind"].astype(object).fillna(outside))
    return codes, list(labels)


def _role_kind_codes(inside: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Codes and labels ('PP send_recv') of each event's parallel role and communication kind, from
    the two columns' codes (no string built per event)."""
    kind_codes, kinds = pd.factorize(inside["kind"])
    role_codes, roles = pd.factorize(inside["parallel_role"])
    width = max(len(roles), 1)
    combined = np.where((kind_codes >= 0) & (role_codes >= 0), kind_codes * width + role_codes, -1)
    codes, uniques = pd.factorize(combined)
    labels = [f"{roles[c % width]} {kinds[c // width]}" if c >= 0 else None for c in uniques]  # distinct pairs
    return np.where(combined >= 0, codes, -1), labels


def _per_step(rows, steps: pd.DataFrame) -> pd.DataFrame:
    """Each row's ns per step laid out long, with the step's wall and share."""
    ordinals = steps["step_ordinal"].to_numpy(np.int64)
    wall_ms = (steps["end_ns"] - steps["start_ns"]).to_numpy(float) / 1e6
    if not rows:
        return pd.DataFrame()
    count = len(ordinals)
    per_step = [w for *_, w in rows]
    table = pd.DataFrame(
        {
            "step_ordinal": np.tile(ordinals, len(rows)),
            "step_id": np.tile(steps["step_id"].to_numpy(), len(rows)),
            "complete": np.tile(steps["complete"].to_numpy(bool), len(rows)),
            "wall_ms": np.tile(wall_ms, len(rows)),
            "breakdown": np.repeat([r[0] for r in rows], count),
            "category": np.repeat([r[1] for r in rows], count),
            "component": np.repeat([r[2] for r in rows], count),
            "ms": np.concatenate(per_step) / 1e6,
        }
    )
    table = table[(table["ms"] > 0) | (table["category"] == "idle")]
    table["share"] = np.where(table["wall_ms"] > 0, table["ms"] / table["wall_ms"].where(table["wall_ms"] > 0, 1), 0.0)
    return table.sort_values(["step_ordinal"], kind="stable").reset_index(drop=True)
