"""Sweep intelligence against planted truth: a 40-root sweep in four cohorts (``npuprof.synth.sweep``)
with one card slow again and again on one host, a decoy slow once, an operator outlier, a
regression at a known build and a healthy MoE cohort whose routing varies. The suspect, the change
point and the outliers are named; clean roots, clean cards and clean cohorts are not. Then the same
archive through SQL, the Python API and sweep_report.html in a real headless Chromium."""

from __future__ import annotations

import collections
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli
from helpers.browser import console_errors
from helpers.sweep_truth import assert_planted_truth, roots_on_the_suspect_card

from npuprof.api import Sweep
from npuprof.pipeline import schema
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.pipeline.sweep.intelligence import PART_FILES
from npuprof.pipeline.sweep.local import run_sweep
from npuprof.pipeline.sweep.merge_state import forget_state
from npuprof.pipeline.sweep.rollup import merge_sweep
from npuprof.pipeline.sweep.trends import cohort_trends
from npuprof.synth import generate
from npuprof.synth.sweep import generate_sweep

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"


@pytest.fixture(scope="session")  # session: a module fixture is built again when xdist interleaves modules
def planted(tmp_path_factory) -> tuple[Path, dict]:
    base = tmp_path_factory.mktemp("planted_sweep")
    truth = generate_sweep(base / "captures", jobs=2)
    run_sweep([str(base / "captures")], base / "archive", jobs=2, series_key=truth["series_key"])
    return base / "archive", truth


def test_the_planted_sweep_names_the_suspect_the_change_point_and_the_outliers(planted):
    archive, truth = planted
    assert_planted_truth(archive, truth)
    summary = json.loads((archive / schema.SWEEP_SUMMARY).read_text())
    card, on_card = truth["fleet_suspect"], len(roots_on_the_suspect_card(truth))
    assert summary["cohort_count"] == len({r["cohort"] for r in truth["roots"]}) and len(summary["fleet_suspects"]) == 1
    link = truth["fleet_link_suspect"]
    assert [s.split(" (")[0] for s in summary["fleet_link_suspects"]] == [
        f"host {link['host_name']} device {link['devices'][0]} <-> host {link['host_name']} device {link['devices'][1]}"
    ]
    assert summary["fleet_suspects"][0].startswith(
        f"host {card['host_name']}, device {card['device_id']}: slow rank in {on_card} of the {on_card} captures"
    )
    # each cohort's key in words: the train cohort is DP4, the inference cohort TP4, the MoE one DP4 EP4
    # (sweep.py's plan)
    labels = pd.read_csv(archive / schema.SWEEP_COHORTS).set_index("cohort_id")["cohort_label"]
    assert not labels.str.contains("=|\\?").any() and labels.str.startswith("model ").all(), labels.tolist()
    assert labels.str.contains("parallel world 4, TP1, PP1, DP4").sum() == 3  # train, deep and moe
    assert labels.str.contains("DP4, EP4").sum() == 1, labels.tolist()
    assert labels.str.contains("parallel world 4, TP4, PP1, DP1").sum() == 1, labels.tolist()


def test_the_sweep_is_a_dataset_for_sql_and_the_python_api(planted):
    archive, truth = planted
    card = truth["fleet_suspect"]
    sql = "SELECT host_name, device_id, COUNT(DISTINCT slug) AS captures FROM ranks GROUP BY 1, 2 ORDER BY 1, 2"
    run = run_cli("query", str(archive), sql, "--csv", str(archive.parent / "cards.csv"))
    assert run.returncode == 0, run.stderr
    cards = pd.DataFrame(run.result["rows"])
    suspect = cards[(cards["host_name"] == card["host_name"]) & (cards["device_id"] == card["device_id"])]
    assert suspect["captures"].tolist() == [len(roots_on_the_suspect_card(truth))]
    assert pd.read_csv(archive.parent / "cards.csv").shape == cards.shape
    sweep = Sweep(archive)
    assert sweep.fleet_suspects()["host_name"].tolist() == [card["host_name"]]
    assert sweep.fleet_link_suspects()["host_a"].tolist() == [truth["fleet_link_suspect"]["host_name"]]
    # every link of every root is a row, so a person can look at what the suspect was compared with
    links = sweep.query("SELECT COUNT(DISTINCT slug) AS roots, MIN(bandwidth_ratio) AS lowest FROM links")
    assert links["roots"].iloc[0] == len(truth["roots"]) and links["lowest"].iloc[0] < 0.5
    slow = sweep.query(
        "SELECT DISTINCT f.slug FROM findings f JOIN roots r USING (slug) "
        "WHERE f.finding_type = 'slow_rank_suspected' AND r.outlier_score IS NOT NULL"
    )
    slow_planted = [r for r in truth["roots"] if r["planted"] in ("slow_rank_suspected", "aicore_freq_throttled")]
    assert len(slow) == len(slow_planted)  # the suspect card's captures and the decoy
    first = sweep.roots().iloc[0]
    steps = sweep.analysis(first["slug"]).steps()
    assert len(steps) and "step_class_id" in steps
    # as fetch --root takes it: the root's path, or its directory's name
    assert sweep.analysis(first["root"]).out_dir == sweep.analysis(Path(first["root"]).name).out_dir
    assert sweep.analysis(first["root"]).out_dir == archive / first["slug"]
    bad = run_cli("query", str(archive), "SELECT no_such_column FROM roots")
    assert bad.returncode == 2 and bad.result["error"].startswith("query failed:") and "Traceback" not in bad.stderr
    assert "DESCRIBE <view> lists a view's columns" in bad.result["error"]
    # the first query a person writes: the step wall under the name they guess
    walls = run_cli("query", str(archive), "SELECT slug, step_wall_ms FROM roots")
    assert walls.returncode == 0, walls.stderr
    rollup = pd.read_csv(archive / "sweep_class_rollup.csv").set_index("slug")["top_step_class_wall_ms_mean"]
    guessed = pd.DataFrame(walls.result["rows"]).set_index("slug")["step_wall_ms"]
    assert guessed.reindex(rollup.index).to_numpy() == pytest.approx(rollup.to_numpy(), nan_ok=True)
    with pytest.raises(ValueError):
        sweep.analysis("../outside")


def test_sweep_report_opens_from_file_with_plots_links_and_no_console_error(planted, browser):
    from selenium.webdriver.common.by import By

    archive, truth = planted
    card = truth["fleet_suspect"]
    page = archive / schema.SWEEP_REPORT_HTML
    console_errors(browser)  # drop what earlier pages logged
    browser.get(page.as_uri())
    assert browser.title == "npuprof sweep"
    plots = browser.find_elements(By.CSS_SELECTOR, "div.js-plotly-plot")
    assert len(plots) == len({r["cohort"] for r in truth["roots"]})  # one per cohort, inlined plotly.js
    # each point under its capture's name, in series order: the train cohort's builds 1..10
    ticks = browser.execute_script(
        "return [...document.querySelectorAll('div.js-plotly-plot')].map(p => p.layout.xaxis.ticktext)"
    )
    builds = [t for t in ticks if t and t[0].startswith("train-build")]
    assert builds and builds[0] == sorted(builds[0]) and len(builds[0]) == 10, ticks
    assert f"host {card['host_name']}, device {card['device_id']}" in browser.find_element(By.TAG_NAME, "body").text
    link = truth["fleet_link_suspect"]
    heads = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
    assert (
        "Link suspects" in heads
        and f"host {link['host_name']} device {link['devices'][0]} <-> "
        in browser.find_element(By.TAG_NAME, "body").text
    )
    links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "td a")]
    assert links and all(Path(link.removeprefix("file://")).is_file() for link in links)
    # outliers told in people's terms: how far off in ms and % of the cohort median (the robust z stays
    # in sweep_outliers.csv), and what moved without "step step wall"
    outliers = pd.read_csv(archive / "sweep_outliers.csv")
    first = outliers.drop_duplicates("slug").iloc[0]
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "table th")]
    assert "off_by" in headers and "robust_z" not in headers
    body = browser.find_element(By.TAG_NAME, "body").text
    assert f"{first['delta_ms']:+,.2f} ms (" in body and "% of the cohort median)" in body
    assert "step step wall" not in body and "robust_z" in outliers.columns
    # the findings across the fleet, each planted finding type with at least the roots it was planted on
    # (the page named none before), and each root's top finding beside it
    assert "Findings" in heads and "top_recoverable_finding" in headers
    rows = browser.execute_script(
        "const h = [...document.querySelectorAll('h2')].find(e => e.textContent === 'Findings');"
        "return [...h.nextElementSibling.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    )
    on_roots = {row[0]: int(row[1]) for row in rows}
    planted = collections.Counter(r["planted"] for r in truth["roots"] if r["planted"] and "_" in r["planted"])
    assert planted and all(on_roots.get(kind, 0) >= count for kind, count in planted.items()), (planted, on_roots)
    # a plot's title is not under plotly's toolbar (top right) however long it is
    boxes = browser.execute_script(
        "return [...document.querySelectorAll('div.js-plotly-plot')].map(p => ['.gtitle', '.modebar'].map(s => {"
        "const r = p.querySelector(s).getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }))"
    )
    overlaps = [t for t, m in boxes if t[0] < m[2] and m[0] < t[2] and t[1] < m[3] and m[1] < t[3]]
    assert boxes and not overlaps, boxes
    assert console_errors(browser) == []


def test_a_hostile_host_name_is_shown_as_text_in_the_sweep_report(tmp_path, browser):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    generate(tmp_path / "captures" / "one", "clean", steps=3, layers=2, trace=False, host=HOSTILE)
    run_sweep([str(tmp_path / "captures")], tmp_path / "archive", jobs=1)
    page = tmp_path / "archive" / schema.SWEEP_REPORT_HTML
    assert HOSTILE not in page.read_text() and "&lt;img src=x" in page.read_text()
    browser.get(page.as_uri())
    assert browser.title == "npuprof sweep" and HOSTILE in browser.find_element(By.TAG_NAME, "body").text
    assert not browser.find_elements(By.CSS_SELECTOR, "body img")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    assert pd.read_parquet(tmp_path / "archive" / "sweep_data" / "ranks.parquet")["host_name"].eq(HOSTILE).all()


def test_a_series_key_that_is_not_a_regular_expression_is_refused_before_any_work(tmp_path):
    run = run_cli("sweep", "--search-root", str(tmp_path), "-o", str(tmp_path / "a"), "--series-key", "build-(")
    assert run.returncode == 2 and "--series-key" in run.result["error"] and not (tmp_path / "a").exists()


def test_a_sweep_whose_roots_all_failed_still_merges_with_empty_tables(tmp_path):
    bad = tmp_path / "captures" / "broken" / "rank_0" / "ASCEND_PROFILER_OUTPUT"
    bad.mkdir(parents=True)
    (bad / "kernel_details.csv").write_text("Name,Type\nx,y\n")
    summary = run_sweep([str(tmp_path / "captures")], tmp_path / "archive", jobs=1)
    assert summary["status_counts"] == {"failed": 1} and "not_written" not in summary
    assert summary["cohort_count"] == 0 and summary["fleet_suspects"] == [] and summary["trends"] == []
    assert Sweep(tmp_path / "archive").table("operators").empty
    assert pd.read_csv(tmp_path / "archive" / schema.SWEEP_ROLLUP)["cohort_id"].isna().all()


@pytest.mark.parametrize(
    ("host", "export", "expected", "source"),
    [
        (None, "text", "synth-host", "rank_dir_name"),  # torch_npu's default worker name: {hostname}_{pid}
        ("node-x", "text", "node-x", "cann_info"),  # PROF_*/host/info.json wins over the dir name
        ("node-y", "db", "node-y", "profiler_db"),  # the db's HOST_INFO wins over both
    ],
)
def test_the_machine_and_card_of_each_rank_come_from_the_capture(tmp_path, host, export, expected, source):
    root = tmp_path / "root"
    generate(root, "clean", ranks=2, steps=3, layers=2, trace=False, host=host, export=export)
    analyze(root, tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="normalize"))
    ranks = json.loads((tmp_path / "out" / schema.CAPTURE_INFO).read_text())["ranks"]
    assert [(r["host_name"], r["host_name_from"]) for r in ranks] == [(expected, source)] * 2
    normalize = json.loads((tmp_path / "out" / schema.stage_manifest_name("normalize")).read_text())
    assert [r["device_ids"] for r in normalize["rank_summaries"]] == [[0], [1]]


def test_a_rank_dir_not_named_by_the_default_worker_name_says_no_host(tmp_path):
    root = tmp_path / "root"
    generate(root, "clean", ranks=2, steps=3, layers=2, trace=False)
    for index, rank_dir in enumerate(sorted(root.glob("*_ascend_pt"))):
        rank_dir.rename(root / f"job_{index}_ascend_pt")  # a custom worker name: no host to read
    analyze(root, tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="normalize"))
    ranks = json.loads((tmp_path / "out" / schema.CAPTURE_INFO).read_text())["ranks"]
    assert [r["host_name"] for r in ranks] == [None, None]


def test_a_fleet_whose_findings_are_none_of_its_types_has_no_suspect():
    """Findings that name ranks but are none of the fleet's types (no clock said anywhere) leave every
    card unflagged; before, the all-null clock column failed the whole merge (a median of text)."""
    from npuprof.pipeline.sweep.fleet import fleet_suspects

    ranks = pd.DataFrame(
        {"slug": ["a", "b"], "rank_id": [0, 0], "host_name": ["node1", "node1"], "device_id": [3.0, 3.0]}
    )
    findings = pd.DataFrame(
        {
            "slug": ["a", "b"],
            "finding_type": ["capture_incomplete_group"] * 2,
            "finding_id": ["a1", "b1"],
            "rank_ids": ["0", "0"],
            "metrics": [json.dumps({"ms_per_step": 3.0})] * 2,
        }
    )
    assert fleet_suspects(ranks, findings).empty


def test_each_outlying_metric_is_explained_by_what_can_move_it():
    """A root whose collective moved most and whose cube compute moved too: its compute metric is put
    down to the operator that moved, its exposed-communication metric to the collective, never the
    collective for compute; a metric nothing narrower explains is its own answer."""
    from npuprof.pipeline.sweep.cohorts import outlier_digest, what_moved

    deltas = {
        "operator": pd.DataFrame({"MatMulV3": [3.0], "Add": [0.1]}, index=["r1"]),
        "collective": pd.DataFrame({"DP allreduce": [5.0]}, index=["r1"]),
    }
    assert what_moved("r1", "compute cube", 3.2, deltas)[:2] == ("operator", "MatMulV3")
    assert what_moved("r1", "exposed DP allreduce", 5.0, deltas)[:2] == ("collective", "DP allreduce")
    # the step wall: the most specific level that explains enough of it (operators before collectives)
    assert what_moved("r1", "step wall", 8.0, deltas)[:2] == ("operator", "MatMulV3")
    assert what_moved("r1", "idle before_first_kernel", 2.0, deltas)[:2] == ("time split", "idle before_first_kernel")
    assert what_moved("r1", "step wall", 80.0, deltas)[:2] == ("step", "step wall")  # nothing explains enough
    rows = pd.DataFrame(
        {
            "slug": ["r1"],
            "metric": ["idle before_first_kernel"],
            "what_moved_level": ["time split"],
            "what_moved": ["idle before_first_kernel"],
            "cohort_median_ms": [1.0],
            "delta_ms": [2.0],
        }
    )
    assert outlier_digest(rows)["what_moved"].iloc[0] == "idle before_first_kernel itself"


def test_a_trend_needs_an_effect_worth_reading_and_a_class_from_nothing_has_no_ratio():
    """Eight captures of one cohort with a 30 ms step: a collective falling 0.09 -> 0.07 ms (22 % of itself,
    nothing of the step) is no trend; one appearing from nothing at 1.5 ms says it appeared, with no ratio
    (never inf); the step wall that rose with it by 7 % is a trend."""
    slugs = [f"r{i}" for i in range(8)]
    later = np.arange(8) >= 4
    walls = pd.Series(30.0 + 2.0 * later + 0.01 * np.sin(np.arange(8)), index=slugs)
    collectives = pd.DataFrame(
        {
            "slug": slugs * 2,
            "collective": ["DP allreduce"] * 8 + ["EP alltoall"] * 8,
            "ms_per_step": [*np.where(later, 0.07, 0.09), *np.where(later, 1.5, 0.0)],
        }
    )
    operators = pd.DataFrame({"slug": slugs, "name": "MatMulV3", "ms_per_step": 20.0})
    order = pd.Series(np.arange(8, dtype=float), index=slugs)
    rows = pd.DataFrame(
        cohort_trends("c1", order, walls, {"operators": operators, "collectives": collectives}, "capture time")
    )
    assert set(rows["metric"]) == {"step wall", "EP alltoall"}, rows[["metric", "summary"]]
    appeared = rows.set_index("metric").loc["EP alltoall"]
    assert pd.isna(appeared["relative_change"]) and "appeared" in appeared["summary"]
    assert rows.set_index("metric").loc["step wall", "relative_change"] == pytest.approx(2 / 30, abs=0.01)
    assert not rows["summary"].str.contains("inf").any()


def _finished_copy(analyzed: Path, archive: Path) -> list[tuple[str, str]]:
    """A finished root's files the merge reads (manifest, cached rows) for each root of ``analyzed``."""
    roots = []
    for source in sorted(p for p in analyzed.iterdir() if (p / schema.ROLLUP_ROW_CACHE).exists()):
        (archive / source.name).mkdir(parents=True)
        for name in (schema.TOP_MANIFEST, schema.ROLLUP_ROW_CACHE):
            shutil.copy2(source / name, archive / source.name / name)
        roots.append((json.loads((source / schema.ROLLUP_ROW_CACHE).read_text())["row"]["root"], source.name))
    return roots


def _merged_files(archive: Path) -> dict[str, bytes]:
    names = [*PART_FILES.values(), schema.SWEEP_ROLLUP, schema.SWEEP_SUMMARY, schema.SWEEP_REPORT_HTML]
    return {name: (archive / name).read_bytes() for name in names}


def test_a_grown_archive_merges_from_its_datasets_and_says_what_a_fresh_merge_says(planted, tmp_path):
    """A merge reads the cached rows of new and changed roots only: the rest come from the last merge's
    datasets. Planted: the unchanged roots' caches are overwritten with garbage of the same size and
    mtime, so a merge that read them would fail; it must say byte for byte what a merge from scratch
    says. A root whose cache changed is read again."""
    archive, truth = planted
    grown = tmp_path / "archive"
    roots = _finished_copy(archive, grown)
    meta = {"mode": "local", "series_key": truth["series_key"]}
    merge_sweep(grown, roots[:30], meta)
    originals = {}
    for _, slug in roots[:30]:  # what the first merge took: unchanged, so never read again
        cache = grown / slug / schema.ROLLUP_ROW_CACHE
        originals[slug], stat = cache.read_bytes(), cache.stat()
        cache.write_bytes(b"\0" * stat.st_size)
        os.utime(cache, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    merge_sweep(grown, roots, meta)
    incremental = _merged_files(grown)
    for slug, content in originals.items():
        (grown / slug / schema.ROLLUP_ROW_CACHE).write_bytes(content)
    forget_state(grown)
    merge_sweep(grown, roots, meta)
    assert _merged_files(grown) == incremental
    assert len(pd.read_parquet(grown / schema.SWEEP_DATA_DIR / "ranks.parquet")["slug"].unique()) == len(roots)

    # a re-analyzed root (its cache rewritten): its new rows replace the old
    slug = roots[0][1]
    cache = grown / slug / schema.ROLLUP_ROW_CACHE
    cached = json.loads(cache.read_text())
    cached["row"]["top_step_class_wall_ms_mean"] = 123.456
    cache.write_text(json.dumps(cached))
    merge_sweep(grown, roots, meta)
    walls = pd.read_csv(grown / schema.SWEEP_ROLLUP).set_index("slug")["top_step_class_wall_ms_mean"]
    assert walls[slug] == 123.456


def test_an_outlier_needs_an_effect_worth_reading_against_its_cohorts_step():
    """Eight captures of one cohort with a 1 s step: a part that moved 2 ms at z 5 (10 % of itself) is
    no outlier of that step (under 0.5 % of it); one that moved 8 ms is."""
    from npuprof.pipeline.sweep.cohorts import outlying, robust_scores

    slugs = [f"r{i}" for i in range(8)]
    idle = [20.0] * 7 + [22.0]  # r7: +2 ms
    exposed = [40.0] * 7 + [48.0]  # r7: +8 ms
    metrics = pd.DataFrame(
        {
            "slug": slugs * 3,
            "metric": ["step wall"] * 8 + ["idle internal"] * 8 + ["exposed DP allreduce"] * 8,
            "value": [1000.0] * 8 + idle + exposed,
        }
    )
    cohorts = pd.DataFrame({"slug": slugs, "cohort_id": "c", "cohort_size": 8})
    scores = robust_scores(metrics, cohorts)
    assert scores.set_index(["slug", "metric"]).loc[("r7", "idle internal"), "z"] > 3.5  # significant, small
    assert outlying(scores)[["slug", "metric"]].values.tolist() == [["r7", "exposed DP allreduce"]]


def test_the_sweep_report_lists_failed_roots_then_outliers_then_the_rest_up_to_its_cap(monkeypatch):
    from npuprof import knowledge
    from npuprof.pipeline.sweep.html import listed_roots

    monkeypatch.setitem(knowledge.load("sweep_rules")["report"], "roots_listed", 3)
    rollup = pd.DataFrame(
        {
            "slug": ["a", "b", "c", "d", "e"],
            "status": ["ok", "ok", "failed", "ok", "ok"],
            "outlier_score": [None, 4.0, None, 9.0, None],
        }
    )
    assert listed_roots(rollup)["slug"].tolist() == ["c", "d", "b"]
