"""How much of each ledger line a finding is credited with: the ms its own replay removes from that line.

A replayed finding's savings come per rank, step and part of the step (savings.py: local work, the wait
at a collective, a collective's transit, the communication stream's overhang). Each saving is placed on
the lines of its rank's step that hold that part, in tiers — the line of the same collective and part
first (a DP all-reduce's wait saving on "communication DP allreduce wait" and "... idle"), then any line
of that part, then the lines the finding's rules name (``ledger:``, its eligible lines) — in proportion
to what each line has left, never more than it has. Local work is compute or idle, which the replay does
not tell apart: work cut from known windows goes first to the line each window ran on (``window_lines``:
the block a kernel ran in), the rest to the eligible lines (an idle window closed lands on idle lines, a
rank's compute at its peers' pace on compute lines), and only then to any compute or idle line.

A finding priced another way (analytic: more micro-batches) has no replay to place: its ms per step is
placed on each of its ranks' steps over its eligible lines, the same way.

Findings are placed most recoverable first; a line two findings would both shorten is credited once,
to the first (the "together" replay counts it once too).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.distinct import map_distinct
from npuprof.pipeline.stages.diagnostics.retiming import slot_of
from npuprof.pipeline.stages.diagnostics.savings import SAVING_COLUMNS, UNKNOWN_ROLE

KEYS = ["rank_id", "step_ordinal"]
WORK_CATEGORIES = ("compute", "idle")
# which line parts each saving part lands on first
PART_LINES = {"wait": ("wait", "idle"), "transit": ("transfer",), "stream": ("transfer", "wait", "idle")}
CREDIT_COLUMNS = ["line_index", "claim_id", "ms"]


def line_parts(line: pd.Series) -> pd.DataFrame:
    """role, kind and part of 'communication <role> <kind> <part>' lines (role may hold a space); empty
    texts for any other line."""
    tokens = line.str.split(" ")
    words = tokens.str.len() > 3
    return pd.DataFrame(
        {
            "role": tokens.map(lambda t: " ".join(t[1:-2])).where(words, ""),
            "kind": tokens.str[-2].where(words, ""),
            "part": tokens.str[-1].where(words, ""),
        },
        index=line.index,
    )


def window_lines(windows: pd.DataFrame, blocks: pd.DataFrame) -> pd.Series:
    """Per window (rank_id, start_us) of cut kernels, the compute line the ledger books its time on:
    "compute <block kind>" for the block (``blocks``: block_segments' rank_id, block_kind, start_us,
    end_us) it starts in, else "compute outside blocks" (summarize's split, ``compute_by_block``)."""
    outside = knowledge.load("summary_rules")["compute_outside_blocks"]
    spans = blocks.dropna(subset=["start_us", "end_us"]).sort_values(["rank_id", "start_us"], ignore_index=True)
    # the block each window starts in, as a step is found for an event (-1: none, the appended "outside")
    kinds = np.append(spans["block_kind"].astype(object).fillna(outside).to_numpy(), outside)
    kind = pd.Series(kinds[slot_of(windows, spans)], index=windows.index)
    compute = knowledge.load("ledger_rules")["lines"]["compute"]
    return pd.Series(map_distinct(kind, lambda component: compute.format(component=component)), index=windows.index)


def line_table(lines: pd.DataFrame) -> pd.DataFrame:
    """The ledger's lines as the placement reads them: rank_id, step_ordinal, category, and for a
    communication line its role, kind and part; ``capacity`` its ms (0 for the residual line)."""
    table = lines[[*KEYS, "category", "line", "ms"]].copy()
    comm = table["category"].eq("communication") & table["line"].str.startswith("communication ")
    table[["role", "kind", "part"]] = line_parts(table["line"].where(comm, ""))
    table["capacity"] = np.where(table["category"].isin(["residual"]), 0.0, table["ms"].clip(lower=0.0))
    return table


def analytic_demand(table: pd.DataFrame, eligible: np.ndarray, ranks: list[int], ms_per_step: float) -> pd.DataFrame:
    """An estimate priced without a replay, as savings: ``ms_per_step`` times its steps on each of
    ``ranks``, spread over the rank's steps as the room its eligible lines have left in each (``table``:
    line_table; the estimate is a mean step's, and a step whose lines hold less takes less of it)."""
    room = table.loc[eligible & table["rank_id"].isin(ranks).to_numpy(), [*KEYS, "capacity"]]
    per_step = room.groupby(KEYS, as_index=False)["capacity"].sum()
    steps = table.loc[table["rank_id"].isin(ranks), KEYS].drop_duplicates()
    per_step = steps.merge(per_step, on=KEYS, how="left").fillna({"capacity": 0.0})
    total = per_step.groupby("rank_id")["capacity"].transform("sum")
    count = per_step.groupby("rank_id")["step_ordinal"].transform("size")
    share = np.where(total > 0, per_step["capacity"] / total.where(total > 0, 1.0), 1.0 / count)
    demand = per_step.assign(part="any", role="", kind="", line="", ms=float(ms_per_step) * count * share)
    return demand[SAVING_COLUMNS]


def place(table: pd.DataFrame, demand: pd.DataFrame, eligible: np.ndarray) -> pd.Series:
    """Place one finding's ``demand`` (SAVING_COLUMNS) on ``table``'s lines (line_table, its
    ``capacity`` lowered in place by what is placed); ``eligible``: the lines its rules name. Returns the
    ms placed per line index."""
    placed = pd.Series(0.0, index=table.index)
    if not len(demand):
        return placed
    remaining = demand.reset_index(drop=True).copy()
    remaining["role"] = remaining["role"].replace("", UNKNOWN_ROLE).where(remaining["part"] != "work", "")
    for tier in TIERS:
        open_demand = remaining[remaining["ms"] > 1e-12]
        if not len(open_demand):
            break
        given = _fill(table.assign(eligible=eligible), open_demand, tier)
        if not len(given):
            continue
        per_line = given.groupby("line_index")["ms"].sum()
        table.loc[per_line.index, "capacity"] -= per_line
        placed.loc[per_line.index] += per_line
        remaining.loc[given["demand"].unique(), "ms"] -= given.groupby("demand")["ms"].sum()
    return placed


def _fill(table: pd.DataFrame, demand: pd.DataFrame, tier: Callable[[pd.DataFrame], pd.Series]) -> pd.DataFrame:
    """One tier's placement: each demand row over the lines of its rank and step the tier admits, in
    proportion to their capacity, at most the demand; a line asked for more than it has gives each ask
    its share. Returns (demand, line_index, ms)."""
    lines = table[table["capacity"] > 1e-12]
    pairs = (
        demand.rename_axis("demand")
        .reset_index()
        .merge(lines.rename_axis("line_index").reset_index(), on=KEYS, suffixes=("", "_line"))
    )
    pairs = pairs[tier(pairs).to_numpy(bool)]
    if not len(pairs):
        return pd.DataFrame(columns=["demand", "line_index", "ms"])
    room = pairs.groupby("demand")["capacity"].transform("sum")
    ms = pairs["ms"].clip(upper=room) * pairs["capacity"] / room
    asked = ms.groupby(pairs["line_index"]).transform("sum")
    ms = ms * (pairs["capacity"] / asked).clip(upper=1.0)
    return pd.DataFrame({"demand": pairs["demand"], "line_index": pairs["line_index"], "ms": ms})


def _same_collective(pairs: pd.DataFrame) -> pd.Series:
    """The line of the saving's own collective and part (its role, kind; wait on wait and idle ...)."""
    return _same_part(pairs) & (pairs["role_line"] == pairs["role"]) & (pairs["kind_line"] == pairs["kind"])


def _same_part(pairs: pd.DataFrame) -> pd.Series:
    """Any communication line of the saving's part (a wait saving on any collective's wait or idle)."""
    part_ok = pd.Series(False, index=pairs.index)
    for part, line_parts in PART_LINES.items():
        part_ok |= (pairs["part"] == part) & pairs["part_line"].isin(line_parts)
    return part_ok


def _own_line(pairs: pd.DataFrame) -> pd.Series:
    """Work cut from windows on the eligible line they ran on (the block a cut kernel ran in)."""
    return (pairs["part"] == "work") & pairs["eligible"] & (pairs["line"] == pairs["line_line"])


def _eligible_work(pairs: pd.DataFrame) -> pd.Series:
    """Local work on the compute or idle lines the finding's rules name."""
    return (pairs["part"] == "work") & pairs["eligible"] & pairs["category"].isin(WORK_CATEGORIES)


def _eligible(pairs: pd.DataFrame) -> pd.Series:
    """Anything on the lines the finding's rules name."""
    return pairs["eligible"].astype(bool)


def _any_work(pairs: pd.DataFrame) -> pd.Series:
    """Local work on any compute or idle line (the replay removed it; the rules named no such line)."""
    return (pairs["part"] == "work") & pairs["category"].isin(WORK_CATEGORIES)


TIERS = (_same_collective, _own_line, _eligible_work, _same_part, _eligible, _any_work)
