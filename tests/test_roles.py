"""One parallel role per communication op in every table of a root: the events (and so the time
accounting and hccl_*_summary.csv) and the ops of communication_summary.csv say the same role for the
same op. Checked on every synth scenario and the real samples, and on a root whose metadata holds a
group whose hash ends in the DP group's digits (the op names carry only those digits: without the
file's full hash the events could not tell the two groups apart)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from npuprof.pipeline import schema
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.sources.group_hash import double_hash
from npuprof.synth import SCENARIOS, generate

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs


def disagreements(out: Path) -> pd.DataFrame:
    """(rank, op name) whose role differs between the communication events and the communication ops."""
    events = pd.read_parquet(out / schema.COMMUNICATION_EVENTS.path, columns=["rank_id", "name", "parallel_role"])
    ops = pd.read_parquet(out / schema.COMMUNICATION_OPS.path, columns=["rank_id", "op_name", "parallel_role"])
    events = events.rename(columns={"name": "op_name"}).drop_duplicates()
    both = events.merge(ops.drop_duplicates(), on=["rank_id", "op_name"], suffixes=("_events", "_ops"))
    return both[both["parallel_role_events"].astype(str) != both["parallel_role_ops"].astype(str)]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_table_of_a_synth_root_gives_an_op_one_role(planted_outputs, name):
    _, out = planted_outputs[name]
    assert disagreements(out).empty


@pytest.mark.parametrize("name", ["qwen3_training", "text_level2"])
def test_every_table_of_a_sample_gives_an_op_one_role(sample_outputs, name):
    out, _ = sample_outputs[name]
    assert disagreements(out).empty


def _decoy_key(digits: str, taken: set[str]) -> str:
    """A group key whose hash ends in ``digits`` (found by counting: about one key in a thousand)."""
    return next(
        key
        for key in (f"group_name_{i}" for i in range(100, 200_000))
        if key not in taken and str(double_hash(key)).endswith(digits)
    )


def test_a_group_sharing_the_dp_groups_digits_leaves_the_dp_allreduce_dp_everywhere(tmp_path):
    root = tmp_path / "root"
    generate(root, "exposed_grad_allreduce", seed=0, steps=3)
    for path in root.glob("*/profiler_metadata.json"):
        metadata = json.loads(path.read_text())
        groups = metadata["parallel_group_info"]
        (dp_key,) = [k for k, g in groups.items() if g["group_name"] == "dp"]
        decoy = _decoy_key(str(double_hash(dp_key))[-3:], set(groups))
        groups[decoy] = {"group_name": "decoy", "group_rank": 0, "global_ranks": [0, 1]}
        path.write_text(json.dumps(metadata))
    analyze(root, tmp_path / "out", jobs=2)
    out = tmp_path / "out"
    assert disagreements(out).empty
    events = pd.read_parquet(out / schema.COMMUNICATION_EVENTS.path, columns=["kind", "parallel_role"])
    assert set(events.loc[events["kind"] == "allreduce", "parallel_role"]) == {"DP"}  # the planted DP sync
    classes = pd.read_csv(out / schema.HCCL_CLASS_SUMMARY_CSV.file)
    assert set(classes.loc[classes["kind"] == "allreduce", "parallel_role"]) == {"DP"}
