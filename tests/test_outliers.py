"""The slow-rank statistics on numbers worked by hand: Dixon's Q for 3..10 members, a robust z (median,
MAD × 1.4826) above that, the imposed-wait gap, and which rank is the low one. Fast, exact unit tests:
the mutation floor (tests/test_mutation_floor.py) runs them against every mutant of outliers.py."""

from __future__ import annotations

import pandas as pd
import pytest

from npuprof.pipeline.stages.diagnostics.outliers import low_outliers

# Dixon's Q at 95 % (the vendor's table, knowledge/detectors/slow_rank/rules.yaml)
Q95 = {3: 0.970, 4: 0.829, 5: 0.710, 6: 0.625, 7: 0.568, 8: 0.526, 9: 0.493, 10: 0.466}


def instances(**members: dict[int, float]) -> pd.DataFrame:
    """alignment_id, rank_id, value rows: one instance per keyword, its members by rank."""
    rows = [(name, rank, value) for name, by_rank in members.items() for rank, value in by_rank.items()]
    return pd.DataFrame(rows, columns=["alignment_id", "rank_id", "value"])


@pytest.mark.parametrize("scale", [1.0, 0.001])  # µs or ms: a span under 1 is a span too
def test_dixons_q_names_the_member_far_below_the_rest(scale):
    # sorted 10, 50, 52, 54: Q = (50 - 10) / (54 - 10) = 0.9091 > 0.829 (n = 4); the gap is the
    # others' median (52) minus the lowest: 42
    members = {3: 52.0 * scale, 1: 10.0 * scale, 0: 54.0 * scale, 2: 50.0 * scale}
    (row,) = low_outliers(instances(a=members), Q95, 3.5, 0.0).to_dict("records")
    assert row["rank_id"] == 1 and row["test"] == "dixon_q" and row["outlier"]
    assert row["statistic"] == pytest.approx(40 / 44) and row["threshold"] == 0.829
    assert row["gap"] == pytest.approx(42.0 * scale)


def test_dixons_q_below_its_critical_value_is_no_outlier():
    # sorted 45, 50, 52, 54: Q = 5 / 9 = 0.5556 < 0.829
    (row,) = low_outliers(instances(a={0: 54.0, 1: 45.0, 2: 50.0, 3: 52.0}), Q95, 3.5, 0.0).to_dict("records")
    assert row["rank_id"] == 1 and row["statistic"] == pytest.approx(5 / 9) and not row["outlier"]


def test_the_q_at_its_critical_value_is_not_above_it():
    # n = 3: sorted 0, 970, 1000 is a Q of exactly 0.970, not above it; 0, 971, 1000 (0.971) is
    result = low_outliers(instances(a={0: 0.0, 1: 970.0, 2: 1000.0}, b={0: 0.0, 1: 971.0, 2: 1000.0}), Q95, 3.5, 0.0)
    assert result.set_index("alignment_id")["statistic"].to_dict() == {"a": 0.97, "b": 0.971}
    assert result.set_index("alignment_id")["outlier"].to_dict() == {"a": False, "b": True}


def test_ten_members_still_take_dixons_q():
    # the table's largest n: sorted 0, 50, 52 x 7, 100 gives Q = 50 / 100 = 0.5 > 0.466 (n = 10)
    members = {0: 0.0, 1: 50.0, 2: 100.0} | {rank: 52.0 for rank in range(3, 10)}
    (row,) = low_outliers(instances(a=members), Q95, 3.5, 0.0).to_dict("records")
    assert row["test"] == "dixon_q" and row["statistic"] == pytest.approx(0.5) and row["threshold"] == 0.466


def test_a_member_listed_twice_counts_with_its_first_value():
    values = pd.concat([instances(a={0: 54.0, 1: 10.0, 2: 50.0, 3: 52.0}), instances(a={1: 53.0})])
    (row,) = low_outliers(values, Q95, 3.5, 0.0).to_dict("records")
    assert row["rank_id"] == 1 and row["statistic"] == pytest.approx(40 / 44)


def test_a_member_that_imposes_too_little_wait_is_no_outlier():
    # the same Q of 0.909, but the others waited only 42 µs on it: under a 50 µs gap it is not tested
    result = low_outliers(instances(a={0: 54.0, 1: 10.0, 2: 50.0, 3: 52.0}), Q95, 3.5, 50.0)
    assert not result["outlier"].iloc[0] and result["gap"].iloc[0] == pytest.approx(42.0)
    assert low_outliers(instances(a={0: 54.0, 1: 10.0, 2: 50.0, 3: 52.0}), Q95, 3.5, 42.0)["outlier"].iloc[0]


# 11 members: above Dixon's table, so a robust z. With the lowest at L, sorted L, 96, 98, 98, 100 x 4, 102,
# 102, 104: median 100; |x - 100| sorted 0 x 4, 2 x 4, 4, 4, 100 - L: MAD 2, sigma 2 x 1.4826 = 2.9652
ELEVEN = [96.0, 98.0, 98.0, 100.0, 100.0, 100.0, 100.0, 102.0, 102.0, 104.0]


@pytest.mark.parametrize("scale", [1.0, 0.1])  # a MAD of 2, and of 0.2: under 1 is a spread too
@pytest.mark.parametrize(("lowest", "outlier"), [(90.0, False), (89.0, True)])
def test_a_large_group_uses_the_robust_z(lowest, outlier, scale):
    members = {rank + 1: value * scale for rank, value in enumerate(ELEVEN)} | {0: lowest * scale}
    (row,) = low_outliers(instances(a=members), Q95, 3.5, 0.0).to_dict("records")
    assert row["test"] == "robust_z" and row["threshold"] == 3.5 and row["rank_id"] == 0
    assert row["statistic"] == pytest.approx((100.0 - lowest) / (2 * 1.4826))
    assert row["outlier"] is outlier
    assert row["gap"] == pytest.approx((100.0 - lowest) * scale)


def test_each_large_group_has_its_own_spread():
    # b is a with every distance from 100 doubled: its MAD is 4, so the same lowest is half as far
    a = {rank + 1: value for rank, value in enumerate(ELEVEN)} | {0: 89.0}
    b = {rank: 100.0 + 2 * (value - 100.0) for rank, value in a.items()} | {0: 89.0}
    result = low_outliers(instances(a=a, b=b), Q95, 3.5, 0.0).set_index("alignment_id")
    assert result["statistic"].to_dict() == pytest.approx({"a": 11 / (2 * 1.4826), "b": 11 / (4 * 1.4826)})


def test_a_large_group_with_no_spread_names_any_lower_member():
    # ten members at 100 and one at 99.5: MAD 0, so any member below the median is infinitely far
    members = {rank: 100.0 for rank in range(1, 11)} | {0: 99.5}
    (row,) = low_outliers(instances(a=members), Q95, 3.5, 0.0).to_dict("records")
    assert row["statistic"] == float("inf") and row["outlier"]
    (even,) = low_outliers(instances(a={rank: 100.0 for rank in range(11)}), Q95, 3.5, 0.0).to_dict("records")
    assert even["statistic"] == 0.0 and not even["outlier"]


def test_instances_are_tested_side_by_side_and_small_ones_left_out():
    # b has 2 members: not tested; c's missing member leaves 3 (its Q uses its own highest, 30)
    values = instances(
        a={0: 54.0, 1: 10.0, 2: 50.0, 3: 52.0},
        b={0: 1.0, 1: 100.0},
        c={0: 30.0, 1: 29.0, 3: 1.0},
    )
    result = low_outliers(values, Q95, 3.5, 0.0).set_index("alignment_id")
    assert list(result.index) == ["a", "c"]
    assert result.loc["c", "rank_id"] == 3 and result.loc["c", "statistic"] == pytest.approx(28 / 29)
    assert result.loc["c", "gap"] == pytest.approx(28.5) and not result.loc["c", "outlier"]  # 0.966 < 0.970
    assert result.loc["a", "rank_id"] == 1 and result.loc["a", "outlier"]


def test_all_members_equal_is_a_q_of_zero():
    (row,) = low_outliers(instances(a={0: 5.0, 1: 5.0, 2: 5.0, 3: 5.0}), Q95, 3.5, 0.0).to_dict("records")
    assert row["statistic"] == 0.0 and row["gap"] == 0.0 and not row["outlier"]


def test_nothing_to_test_is_an_empty_table_with_the_columns():
    result = low_outliers(instances(a={0: 1.0, 1: 2.0}), Q95, 3.5, 0.0)
    assert result.empty and list(result.columns) == [
        "alignment_id",
        "rank_id",
        "statistic",
        "threshold",
        "test",
        "gap",
        "outlier",
    ]
