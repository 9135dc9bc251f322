"""How a finding's savings are placed on the ledger's lines (ledger_credit.py), on small ledgers worked by
hand: the tiers (its own collective and part first, then the line its cut kernels ran on, the lines its
rules name, any line of the part, any compute or idle line), the share each line takes, never more than a
line holds, and an analytic estimate spread over the steps by their room. Fast, exact unit tests: the
mutation floor (tests/test_mutation_floor.py) runs them against every mutant of ledger_credit.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from npuprof.pipeline.stages.diagnostics.ledger_credit import (
    analytic_demand,
    line_parts,
    line_table,
    place,
    window_lines,
)
from npuprof.pipeline.stages.diagnostics.savings import SAVING_COLUMNS


def ledger(*lines: tuple[int, int, str, str, float]) -> pd.DataFrame:
    """Ledger rows from (rank_id, step_ordinal, category, line, ms)."""
    return pd.DataFrame(lines, columns=["rank_id", "step_ordinal", "category", "line", "ms"])


def demand(*rows: tuple[int, int, str, str, str, str, float]) -> pd.DataFrame:
    """Savings rows from (rank_id, step_ordinal, part, role, kind, line, ms)."""
    return pd.DataFrame(rows, columns=SAVING_COLUMNS)


STEP = ledger(
    (0, 0, "compute", "compute attention", 30.0),
    (0, 0, "compute", "compute ffn", 10.0),
    (0, 0, "compute", "compute outside blocks", 20.0),
    (0, 0, "communication", "communication DP allreduce wait", 8.0),
    (0, 0, "communication", "communication DP allreduce idle", 2.0),
    (0, 0, "communication", "communication TP allgather wait", 5.0),
    (0, 0, "communication", "communication DP allreduce transfer", 6.0),
    (0, 0, "idle", "idle launch", 4.0),
    (0, 0, "residual", "not accounted", 1.0),
)
COMPUTE = STEP["category"].eq("compute").to_numpy()


def placed_on(lines: pd.DataFrame, savings: pd.DataFrame, eligible: np.ndarray) -> dict[str, float]:
    """ms placed per line name (lines given none left out), and the table's capacity left per line."""
    table = line_table(lines)
    placed = place(table, savings, eligible)
    return {name: round(ms, 6) for name, ms in zip(lines["line"], placed, strict=True) if ms > 0}


def test_a_communication_lines_role_kind_and_part_are_read_from_its_words():
    parts = line_parts(pd.Series(["communication DP allreduce wait", "communication unknown send_recv idle", "x y"]))
    assert parts.to_dict("records") == [
        {"role": "DP", "kind": "allreduce", "part": "wait"},
        {"role": "unknown", "kind": "send_recv", "part": "idle"},
        {"role": "", "kind": "", "part": ""},
    ]
    roles = line_parts(pd.Series(["communication PP stage 0 send_recv transfer"]))
    assert roles.iloc[0].to_dict() == {"role": "PP stage 0", "kind": "send_recv", "part": "transfer"}


def test_the_residual_line_holds_nothing_to_credit():
    table = line_table(STEP)
    assert table.loc[STEP["line"] == "not accounted", "capacity"].tolist() == [0.0]
    assert table.loc[STEP["line"] == "compute ffn", "capacity"].tolist() == [10.0]
    negative = line_table(ledger((0, 0, "compute", "compute ffn", -2.0)))
    assert negative["capacity"].tolist() == [0.0]


def test_a_wait_saving_goes_to_its_own_collectives_wait_and_idle_first():
    # 6 ms of DP all-reduce wait: its wait (8) and idle (2) lines hold 10, shared 8 : 2
    saving = demand((0, 0, "wait", "DP", "allreduce", "", 6.0))
    assert placed_on(STEP, saving, np.zeros(len(STEP), bool)) == {
        "communication DP allreduce wait": 4.8,
        "communication DP allreduce idle": 1.2,
    }


def test_a_wait_saving_beyond_its_collective_spills_to_any_wait_then_to_the_rules_lines():
    # 13 ms: its own collective's 10, then the TP all-gather's wait (5) takes 3
    saving = demand((0, 0, "wait", "DP", "allreduce", "", 13.0))
    assert placed_on(STEP, saving, np.zeros(len(STEP), bool)) == {
        "communication DP allreduce wait": 8.0,
        "communication DP allreduce idle": 2.0,
        "communication TP allgather wait": 3.0,
    }


def test_a_transit_saving_lands_on_transfer_lines_only():
    saving = demand((0, 0, "transit", "DP", "allreduce", "", 9.0))  # 6 ms of transfer is all there is
    assert placed_on(STEP, saving, np.zeros(len(STEP), bool)) == {"communication DP allreduce transfer": 6.0}


def test_cut_kernels_work_goes_to_the_line_they_ran_on_before_the_other_eligible_ones():
    saving = demand((0, 0, "work", "", "", "compute ffn", 4.0), (0, 0, "work", "", "", "", 6.0))
    # the ffn line takes its own 4; the unnamed 6 spread over the eligible compute lines' room left
    # (attention 30, ffn 6, outside 20 of 56): 3.2142857, 0.6428571, 2.1428571
    assert placed_on(STEP, saving, COMPUTE) == pytest.approx(
        {"compute ffn": 4.0 + 6 * 6 / 56, "compute attention": 6 * 30 / 56, "compute outside blocks": 6 * 20 / 56}
    )


def test_a_kernel_line_the_rules_do_not_name_is_not_preferred():
    saving = demand((0, 0, "work", "", "", "compute ffn", 6.0))
    only_attention = (STEP["line"] == "compute attention").to_numpy()
    assert placed_on(STEP, saving, only_attention) == {"compute attention": 6.0}


def test_a_kernel_lines_overflow_goes_on_to_the_other_eligible_lines():
    saving = demand((0, 0, "work", "", "", "compute ffn", 16.0))  # the ffn line holds 10
    assert placed_on(STEP, saving, COMPUTE) == pytest.approx(
        {"compute ffn": 10.0, "compute attention": 6 * 30 / 50, "compute outside blocks": 6 * 20 / 50}
    )


def test_work_no_rule_names_lands_on_any_compute_or_idle_line_never_on_communication():
    saving = demand((0, 0, "work", "", "", "", 64.0))  # more than the 64 of compute and idle
    assert placed_on(STEP, saving, np.zeros(len(STEP), bool)) == pytest.approx(
        {"compute attention": 30.0, "compute ffn": 10.0, "compute outside blocks": 20.0, "idle launch": 4.0}
    )


def test_an_eligible_communication_line_takes_what_its_own_part_left():
    # a stream saving: transfer lines first (6), then any wait or idle line (15), then the eligible
    saving = demand((0, 0, "stream", "EP", "alltoall", "", 25.0))
    eligible = (STEP["line"] == "idle launch").to_numpy()
    assert placed_on(STEP, saving, eligible) == pytest.approx(
        {
            "communication DP allreduce transfer": 6.0,
            "communication DP allreduce wait": 8.0,
            "communication DP allreduce idle": 2.0,
            "communication TP allgather wait": 5.0,
            "idle launch": 4.0,
        }
    )


def test_savings_land_on_their_own_rank_and_step_only():
    two = pd.concat([STEP, STEP.assign(step_ordinal=1), STEP.assign(rank_id=1)], ignore_index=True)
    saving = demand((0, 1, "transit", "DP", "allreduce", "", 2.0))
    placed = place(line_table(two), saving, np.zeros(len(two), bool))
    assert placed[placed > 0].index.tolist() == [len(STEP) + 6] and placed.sum() == pytest.approx(2.0)


def test_a_line_asked_by_two_savings_gives_each_its_share_and_never_more_than_it_holds():
    lines = ledger((0, 0, "compute", "compute ffn", 4.0), (0, 0, "compute", "compute attention", 1.0))
    both = demand((0, 0, "work", "", "", "compute ffn", 3.0), (0, 0, "work", "", "", "compute ffn", 3.0))
    table = line_table(lines)
    placed = place(table, both, np.array([True, True]))
    assert placed.tolist() == pytest.approx([4.0, 1.0])  # 6 asked, 5 held
    assert table["capacity"].tolist() == pytest.approx([0.0, 0.0])


def test_placing_lowers_the_room_the_next_finding_sees():
    table = line_table(STEP)
    place(table, demand((0, 0, "transit", "DP", "allreduce", "", 4.0)), np.zeros(len(STEP), bool))
    second = place(table, demand((0, 0, "transit", "DP", "allreduce", "", 4.0)), np.zeros(len(STEP), bool))
    assert second.sum() == pytest.approx(2.0)


def test_nothing_asked_is_nothing_placed():
    placed = place(line_table(STEP), demand(), np.ones(len(STEP), bool))
    assert placed.tolist() == [0.0] * len(STEP)


def test_a_saving_of_an_unnamed_group_meets_the_unknown_roles_lines():
    # a wait saving whose collective names no group goes to the "unknown" role's wait, not the DP one
    lines = ledger(
        (0, 0, "communication", "communication unknown allreduce wait", 3.0),
        (0, 0, "communication", "communication DP allreduce wait", 3.0),
    )
    saving = demand((0, 0, "wait", "", "allreduce", "", 2.0))
    assert placed_on(lines, saving, np.zeros(2, bool)) == {"communication unknown allreduce wait": 2.0}


def test_an_analytic_estimate_spreads_over_each_ranks_steps_by_their_room():
    # rank 0's eligible compute: step 0 holds 30, step 1 holds 10, step 2 none (idle only); 5 ms a step
    # over 3 steps is 15 ms: 11.25 on step 0, 3.75 on step 1, none on step 2. Rank 1 has no eligible
    # room (its idle lines, 2 and 4 ms, are not the rules'): 5 ms on each of its steps, whatever they hold
    lines = ledger(
        (0, 0, "compute", "compute ffn", 30.0),
        (0, 1, "compute", "compute ffn", 10.0),
        (0, 2, "idle", "idle launch", 7.0),
        (1, 0, "idle", "idle launch", 2.0),
        (1, 1, "idle", "idle launch", 4.0),
    )
    table = line_table(lines)
    eligible = lines["category"].eq("compute").to_numpy()
    spread = analytic_demand(table, eligible, [0, 1], 5.0)
    assert list(spread.columns) == SAVING_COLUMNS and set(spread["part"]) == {"any"}
    assert spread.set_index(["rank_id", "step_ordinal"])["ms"].to_dict() == pytest.approx(
        {(0, 0): 11.25, (0, 1): 3.75, (0, 2): 0.0, (1, 0): 5.0, (1, 1): 5.0}
    )
    assert place(table, spread, eligible).tolist() == pytest.approx([11.25, 3.75, 0.0, 0.0, 0.0])


def test_an_analytic_estimate_over_lines_under_a_millisecond():
    lines = ledger((0, 0, "compute", "compute ffn", 0.3), (0, 1, "compute", "compute ffn", 0.1))
    spread = analytic_demand(line_table(lines), np.array([True, True]), [0], 0.2)
    assert spread["ms"].tolist() == pytest.approx([0.3, 0.1])


def test_work_goes_to_the_eligible_compute_before_an_eligible_communication_line():
    eligible = STEP["line"].isin(["compute ffn", "communication TP allgather wait"]).to_numpy()
    saving = demand((0, 0, "work", "", "", "", 12.0))  # the ffn line holds 10; the wait takes the rest
    assert placed_on(STEP, saving, eligible) == pytest.approx(
        {"compute ffn": 10.0, "communication TP allgather wait": 2.0}
    )


def test_a_kernel_window_is_booked_on_the_block_it_starts_in():
    blocks = pd.DataFrame(
        {
            "rank_id": [0, 0, 1],
            "block_kind": ["attention", "ffn", "moe"],
            "start_us": [100.0, 200.0, 100.0],
            "end_us": [190.0, 300.0, 150.0],
        }
    )
    windows = pd.DataFrame({"rank_id": [0, 0, 0, 0, 1, 1], "start_us": [100.0, 195.0, 300.0, 50.0, 120.0, 200.0]})
    assert window_lines(windows, blocks).tolist() == [
        "compute attention",  # at a block's start
        "compute outside blocks",  # between two blocks
        "compute ffn",  # at a block's end
        "compute outside blocks",  # before the first
        "compute moe",  # another rank's blocks
        "compute outside blocks",
    ]


def test_a_block_without_a_kind_is_outside_the_blocks():
    blocks = pd.DataFrame({"rank_id": [0], "block_kind": [None], "start_us": [0.0], "end_us": [10.0]})
    windows = pd.DataFrame({"rank_id": [0], "start_us": [5.0]})
    assert window_lines(windows, blocks).tolist() == ["compute outside blocks"]
