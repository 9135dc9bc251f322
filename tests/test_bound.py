"""What bounds a kernel (summaries/bound.py): the pipeline family with the most time, ``mixed`` when the top two
are close, computed a column at a time; checked against the definition written plainly (a sort of each row)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from npuprof import knowledge
from npuprof.pipeline.summaries.bound import _added, pipe_families, pipe_family_codes

RULES = knowledge.load("summary_rules")["bound"]
STAGES = list(RULES["stages"])


@pytest.mark.parametrize("count", range(1, 8))
def test_columns_added_in_turn_are_numpys_row_sums(count):
    rng = np.random.default_rng(count)
    columns = [rng.random(50_000) * 10.0 ** rng.integers(-9, 9, 50_000) for _ in range(count)]
    for stacked in (np.column_stack(columns), np.asfortranarray(np.column_stack(columns))):
        assert np.array_equal(_added(columns), stacked.sum(axis=1))  # bit for bit, not approximately


def _by_definition(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(family label, signal) per row: each row's family times sorted, the top two compared with the margin."""
    values = np.where(np.isnan(times), 0.0, times)
    families = sorted(set(RULES["stages"].values()))
    family_time = np.column_stack(
        [values[:, [i for i, s in enumerate(STAGES) if RULES["stages"][s] == f]].sum(axis=1) for f in families]
    )
    order = np.sort(family_time, axis=1)
    total = family_time.sum(axis=1)
    gap = (order[:, -1] - order[:, -2]) / np.where(total > 0, total, 1.0)
    top = np.array(families, dtype=object)[family_time.argmax(axis=1)]
    signal = (~np.isnan(times)).any(axis=1) & (values.sum(axis=1) > 0)
    return np.where(gap < RULES["mixed_margin"], "mixed", top), signal


def test_families_match_their_definition_on_ties_gaps_and_missing_times():
    rng = np.random.default_rng(7)
    times = rng.random((20_000, len(STAGES))) * 100
    times[rng.random(times.shape) < 0.3] = np.nan  # stages a capture did not record
    times[:500] = np.nan  # no pipe times at all: no signal
    times[500:1000] = 0.0  # recorded, all zero: no signal either
    times[1000:2000] = np.round(times[1000:2000] / 25) * 25  # coarse values: many exact ties between families
    found = pipe_family_codes(times)
    label, signal = _by_definition(times)
    assert np.array_equal(found.names[found.code], label) and np.array_equal(found.signal, signal)
    assert not signal[:1000].any() and signal[1000:].mean() > 0.9
    assert {"mixed", "aic_mte", "aiv_mte", "cube", "vector"} <= set(label[signal])


def test_a_kernel_is_bound_by_the_family_it_spends_its_pipes_in():
    rows = pd.DataFrame(
        [
            {"aic_mte2_time_us": 90.0, "aic_mac_time_us": 10.0},  # the cube waits on its memory pipe
            {"aiv_vec_time_us": 80.0, "aiv_mte2_time_us": 20.0},  # vector work
            {"aic_mac_time_us": 50.0, "aiv_vec_time_us": 48.0},  # two families within the margin
            {},  # no pipe times
        ],
        columns=STAGES,
    )
    values, family, signal = pipe_families(rows)
    assert family[:3].tolist() == ["aic_mte", "vector", "mixed"] and signal.tolist() == [True, True, True, False]
    assert values[3].tolist() == [0.0] * len(STAGES)
