"""A sweep of serving captures (issue 69): each serving root's forwards per phase in the rollup, serving
roots in a cohort apart from training ones, and a root scored per phase — one whose host readies every
forward 500 µs late is off its cohort on the decode's gap before forwards, and the clean ones are not."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from npuprof.pipeline import schema
from npuprof.pipeline.sweep.cohorts import PHASE_METRICS
from npuprof.pipeline.sweep.local import run_sweep
from npuprof.synth import SCENARIOS, generate

pytestmark = pytest.mark.xdist_group("sweep")

CLEAN_SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """Three clean serving roots, one with the late host, and a training root of the same dense model."""
    base = tmp_path_factory.mktemp("serving_sweep")
    for seed in CLEAN_SEEDS:
        generate(base / "captures" / f"serving_{seed}", "serving", seed=seed, trace=False)
    generate(base / "captures" / "late_host", "serving_host_gap", seed=4, trace=False)
    generate(base / "captures" / "training", "clean", seed=1, ranks=2, trace=False)
    run_sweep([str(base / "captures")], base / "archive", jobs=2)
    return base / "archive"


def _by_capture(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (rows by slug) indexed by the capture's folder name (a slug is the path with a hash)."""
    return frame.assign(capture=frame["slug"].str.split("__").str[1].str.rsplit("-", n=1).str[0])


def _rollup(archive: Path) -> pd.DataFrame:
    return _by_capture(pd.read_csv(archive / schema.SWEEP_ROLLUP)).set_index("capture")


def test_each_serving_root_has_its_phases_in_the_rollup(archive):
    rollup = _rollup(archive)
    assert rollup.loc["training", "workload"] == "training" and pd.isna(rollup.loc["training", "decode_forwards"])
    for slug in [f"serving_{seed}" for seed in CLEAN_SEEDS] + ["late_host"]:
        row = rollup.loc[slug]
        view = json.loads((archive / row["slug"] / schema.ANALYSIS_SUMMARY).read_text())["serving"]["phases"]
        assert row["workload"] == "serving"
        for phase, figures in view.items():
            if phase == "dummy":
                continue
            assert row[f"{phase}_forwards"] == figures["forwards"]
            assert row[f"{phase}_wall_p50_ms"] == pytest.approx(figures["wall_p50_ms"])
            assert row[f"{phase}_us_per_token"] == pytest.approx(figures["device_us_per_token"])
        # the late host's decodes wait 500 µs more before them; their device time is the clean ones'
        assert row["decode_gap_p50_ms"] == pytest.approx(0.524 if slug == "late_host" else 0.024, abs=0.004)
        # the planted padding: each full-graph decode's captured size less its batch, over the decodes' tokens
        decodes = [f for f in SCENARIOS["serving"].forwards if f.phase == "decode"]
        padding = sum(f.graph_tokens - f.tokens for f in decodes if f.graph == "full")
        computed = sum(f.tokens for f in decodes) + padding
        assert row["decode_padded_share"] == pytest.approx(padding / computed, abs=1e-4)
    assert pd.isna(rollup.loc["training", "decode_padded_share"])


def test_serving_roots_are_a_cohort_apart_from_training_ones(archive):
    rollup = _rollup(archive)
    serving = rollup[rollup["workload"] == "serving"]
    assert serving["cohort_id"].nunique() == 1 and rollup.loc["training", "cohort_id"] not in set(serving["cohort_id"])
    labels = pd.read_csv(archive / schema.SWEEP_COHORTS).set_index("cohort_id")["cohort_label"]
    assert labels[serving["cohort_id"].iloc[0]].endswith("workload serving")
    assert labels[rollup.loc["training", "cohort_id"]].endswith("workload training")


def test_the_late_host_is_off_its_cohort_on_the_gap_before_its_decodes(archive):
    outliers = _by_capture(pd.read_csv(archive / schema.SWEEP_OUTLIERS))
    late = outliers[outliers["capture"] == "late_host"].set_index("metric")
    gap = late.loc["decode gap before forwards p50"]
    assert gap["delta_ms"] == pytest.approx(0.5, abs=0.01)
    assert gap["what_moved_level"] == "forwards" and gap["evidence"].endswith(schema.FORWARD_SUMMARY_CSV.file)
    # the device's own time per forward did not move, and no clean root is off its cohort on a phase
    assert not {f"{phase} forward wall p50" for phase in ("prefill", "mixed", "decode")} & set(late.index)
    clean = outliers[outliers["capture"].str.startswith("serving_")]
    assert not set(clean["metric"]) & set(PHASE_METRICS)
