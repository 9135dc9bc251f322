"""What the planted sweep (``npuprof.synth.sweep``) must say, read from its ``sweep_truth.json``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from npuprof.pipeline import schema
from npuprof.synth.timeline import NOMINAL_AICORE_MHZ


def slug_of(archive: Path) -> dict[str, str]:
    """Root dir name -> slug, from the rollup."""
    rollup = pd.read_csv(archive / schema.SWEEP_ROLLUP)
    return {Path(root).name: slug for root, slug in zip(rollup["root"], rollup["slug"])}


def roots_on_the_suspect_card(truth: dict) -> list[dict]:
    """The planted sweep's roots captured on its fleet suspect's host (every root uses every card of its host)."""
    return [r for r in truth["roots"] if r["host"] == truth["fleet_suspect"]["host_name"]]


def assert_planted_truth(archive: Path, truth: dict) -> None:
    """The suspect card, the change point, the outliers and the cohorts the truth plants, and nothing
    on the clean roots, wherever the sweep was merged (local pool or the service)."""
    slugs = slug_of(archive)
    roots = truth["roots"]
    planted = {slugs[r["name"]] for r in roots if r["planted"]}
    clean = {slugs[r["name"]] for r in roots if not r["planted"]}
    cohort_sizes = sorted(Counter(r["cohort"] for r in roots).values())

    cohorts = pd.read_csv(archive / schema.SWEEP_COHORTS)
    assert sorted(cohorts["root_count"]) == cohort_sizes
    baselines = pd.read_csv(archive / schema.SWEEP_COHORT_BASELINES)
    levels = {"metric", "step class", "layer class", "block class", "operator", "collective"}
    assert set(baselines["level"]) == levels
    walls = baselines[(baselines["level"] == "metric") & (baselines["key"] == "step wall")]
    assert sorted(walls["root_count"]) == cohort_sizes and (walls["spread"] >= 0).all()

    expected = truth["fleet_suspect"]
    suspects = pd.read_csv(archive / schema.FLEET_SUSPECTS)
    assert suspects[["host_name", "device_id"]].to_dict("records") == [expected]  # the decoy (slow once) is not
    suspect = suspects.iloc[0]
    on_card = roots_on_the_suspect_card(truth)
    assert on_card and all(r["planted"] and r["rank"] == expected["device_id"] for r in on_card)  # slow every time
    assert suspect["appearances"] == suspect["flagged"] == len(on_card)
    assert set(suspect["roots"].split(";")) == {slugs[r["name"]] for r in on_card}
    throttled = [r for r in on_card if r["planted"] == "aicore_freq_throttled"]
    assert suspect["throttled_count"] == len(throttled) == 1
    assert suspect["aicore_freq_mhz_median"] == pytest.approx(NOMINAL_AICORE_MHZ / throttled[0]["factor"], abs=1)

    # the link slow again and again across two jobs is the one link suspect; the decoy, a third as fast
    # once, is that capture's own finding only; no capture's analysis names the suspect link on its own
    link = truth["fleet_link_suspect"]
    link_suspects = pd.read_csv(archive / schema.FLEET_LINK_SUSPECTS)
    ends = link_suspects[["host_a", "device_a", "host_b", "device_b"]].to_dict("records")
    assert ends == [
        {"host_a": link["host_name"], "device_a": link["devices"][0]}
        | {"host_b": link["host_name"], "device_b": link["devices"][1]}
    ], link_suspects
    on_link = {slugs[r["name"]] for r in roots if r["host"] == link["host_name"]}
    row = link_suspects.iloc[0]
    assert set(row["roots"].split(";")) == on_link and row["appearances"] == row["flagged"] == len(on_link)
    assert row["cohorts"] == len({r["cohort"] for r in roots if r["host"] == link["host_name"]}) >= 2
    factor = next(r["slow_link"]["factor"] for r in roots if r["host"] == link["host_name"])
    assert row["bandwidth_ratio_median"] == pytest.approx(1 / factor, rel=0.02)
    findings = pd.read_parquet(archive / schema.SWEEP_DATA_DIR / "findings.parquet")
    said = set(findings.loc[findings["finding_type"] == "slow_link_suspected", "slug"])
    decoys = {slugs[r["name"]] for r in roots if r.get("slow_link") and r["host"] != link["host_name"]}
    assert decoys and said == decoys

    regression = truth["regression"]
    trends = pd.read_csv(archive / schema.SWEEP_TRENDS)
    wall = trends[trends["metric"] == "step wall"]
    assert len(wall) == 1, wall  # one change point, in the series that has one
    change = wall.iloc[0]
    assert change["change_at"] == slugs[regression["first_root"]]
    assert change["relative_change"] == pytest.approx(regression["step_wall_change"], rel=0.25)
    assert regression["kernel"] in change["movers"]
    assert set(trends["change_at"]) == {change["change_at"]}  # its classes change at the same build, nothing else

    outliers = pd.read_csv(archive / schema.SWEEP_OUTLIERS)
    named = set(outliers["slug"])
    assert named <= planted and not named & clean
    infer_planted = {slugs[r["name"]] for r in roots if r["planted"] and r["cohort"] == "infer"}
    assert infer_planted <= named  # every slow card, the decoy and the operator outlier
    # each outlying metric is explained by something that can move it: a compute share by an operator or
    # a class, exposed communication by a collective (never a collective for a compute share), else itself
    movers = {"compute": {"operator", "block class", "layer class"}, "exposed": {"collective"}}
    for row in outliers.itertuples():
        head = row.metric.split()[0]
        allowed = movers.get(head, {"operator", "collective", "block class", "layer class", "step"})
        assert row.what_moved_level in allowed | {"time split"}, (row.metric, row.what_moved_level)
        assert row.what_moved_level != "time split" or row.what_moved == row.metric
    first = outliers.drop_duplicates("slug").set_index("slug")
    for root in roots:
        if root["name"] not in slugs or slugs[root["name"]] not in named:
            continue
        row = first.loc[slugs[root["name"]]]
        if root["cohort"] == "infer" and root["kernel_factors"]:  # an operator outlier: that operator moved
            moved = row["what_moved"]
            assert row["what_moved_level"] == "operator" and any(k in moved for k in root["kernel_factors"]), moved
        if root["cohort"] == "train":  # a regressed build: its kernel moved
            assert row["what_moved_level"] == "operator" and regression["kernel"] in row["what_moved"]
        if root["planted"] == "slow_rank_suspected":
            assert row["root_top_finding"] == f"slow_rank_suspected (ranks {root['rank']})"
    regressed = {slugs[r["name"]] for r in roots if r["cohort"] == "train" and r["planted"]}
    assert named & regressed, "no regressed build is named an outlier"

    # the healthy MoE cohort is quiet although its captures differ as real ones do: its all-to-all time
    # follows each capture's routing, and its grouped matmuls' bound family flips in some captures only
    moe = {slugs[r["name"]] for r in roots if r["cohort"] == "moe"}
    assert moe and not moe & named and not moe & set(trends["change_at"])
    split = pd.read_parquet(archive / schema.SWEEP_DATA_DIR / "time_split.parquet")
    split = split[split["slug"].isin(moe) & (split["breakdown"] == "primary")]
    families = split[split["category"] == "compute"].groupby("component")["slug"].nunique()
    assert 0 < families.get("aic_mte", 0) < len(moe), families
    alltoall = split[split["component"] == "alltoallv"]["ms_per_step"]
    assert alltoall.max() / alltoall.min() > 1.15, alltoall

    # no ratio of nothing reaches a row: every number in every merged table is finite or empty
    for name in (schema.SWEEP_ROLLUP, schema.SWEEP_OUTLIERS, schema.SWEEP_TRENDS, schema.SWEEP_COHORT_BASELINES):
        numbers = pd.read_csv(archive / name).select_dtypes("number").to_numpy(dtype=float)
        assert not np.isinf(numbers).any(), name

    rollup = pd.read_csv(archive / schema.SWEEP_ROLLUP)
    assert rollup["cohort_id"].notna().all() and set(rollup.loc[rollup["outlier_score"].notna(), "slug"]) == named
