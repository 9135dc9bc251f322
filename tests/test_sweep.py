"""Local sweep: roots found and folded, each analyzed alone, failures isolated, rollup from the archive."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from conftest import PYTORCH_DATA, QWEN_TRAINING, copy_sample, root_dirs, run_cli

from npuprof.pipeline.errors import EXIT_NO_SPACE, EXIT_PARTIAL
from npuprof.pipeline.sweep.roots import find_roots, root_slug
from npuprof.synth import generate

pytestmark = pytest.mark.xdist_group("sweep")  # one worker: shares its fixtures


@pytest.fixture(scope="module")
def search_root(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("sweep") / "captures"
    copy_sample(QWEN_TRAINING, base / "team_a" / "qwen3_step13")
    copy_sample(PYTORCH_DATA / "text" / "level1", base / "team_a" / "cnn_level1")
    generate(base / "team_b" / "slow", "slow_rank", seed=3, trace=False)
    generate(base / "team_b" / "clean", "clean", seed=3, trace=False)
    bad = base / "team_b" / "broken" / "rank_0" / "ASCEND_PROFILER_OUTPUT"
    bad.mkdir(parents=True)
    (bad / "kernel_details.csv").write_text("Name,Type\nx,y\n")
    copy_sample(PYTORCH_DATA / "text" / "level2", base / "team_a" / "old.bak")  # backups are ignored
    return base


def test_roots_are_case_dirs_with_rank_dirs_folded_in(search_root):
    roots = [str(r.relative_to(search_root)) for r in find_roots([search_root])]
    assert roots == ["team_a/cnn_level1", "team_a/qwen3_step13", "team_b/broken", "team_b/clean", "team_b/slow"]
    slugs = {root_slug(r, [search_root]) for r in find_roots([search_root])}
    assert len(slugs) == 5 and all(s.startswith("captures__team_") for s in slugs)


@pytest.fixture(scope="module")
def swept(search_root, tmp_path_factory):
    """The sweep of ``search_root`` through the CLI, once for the module: (its run, its archive)."""
    out = tmp_path_factory.mktemp("swept") / "archive"
    run = run_cli("sweep", "--search-root", str(search_root), "-o", str(out), "--jobs", "2", "--progress", "none")
    return run, out


def test_sweep_analyzes_every_root_and_isolates_the_broken_one(swept, search_root):
    run, out = swept
    assert run.returncode == EXIT_PARTIAL, run.stderr  # automation tells a partial sweep from an all-ok one
    summary = run.result
    assert summary["status"] == "partial" and summary["status_counts"] == {"ok": 4, "failed": 1}
    assert (
        summary["failed_roots"][0]["root"].endswith("team_b/broken")
        and "Start Time(us)" in summary["failed_roots"][0]["error"]
    )
    rollup = pd.read_csv(out / "sweep_class_rollup.csv")
    assert len(rollup) == 5 and rollup["slug"].is_unique
    row = rollup.set_index(rollup["root"].str.rsplit("/", n=2).str[-2:].str.join("/"))
    assert row.loc["team_a/qwen3_step13", "rank_count"] == 4 and row.loc["team_a/qwen3_step13", "layers_per_pass"] == 14
    assert row.loc["team_a/qwen3_step13", "model_best_candidate"] == "Qwen3-0.6B"  # from the kernels alone
    assert row.loc["team_a/qwen3_step13", "hidden_size"] == 1024
    assert row.loc["team_b/broken", "status"] == "failed" and row.loc["team_b/broken", "phase"] == "normalize (rank 0)"
    assert pd.isna(row.loc["team_a/cnn_level1", "layers_per_pass"])  # no transformer layers: nothing invented
    # the planted slow rank shows as all-reduce rank skew: its peers wait, it does not
    assert row.loc["team_b/slow", "hccl_top_kind"] == "allreduce"
    assert (
        row.loc["team_b/slow", "hccl_top_kind_rank_skew_ratio"]
        > 5 * row.loc["team_b/clean", "hccl_top_kind_rank_skew_ratio"]
    )
    # a "model x configuration" table: parallel sizes and where the time goes, from summarize
    slow_truth = json.loads((search_root / "team_b" / "slow" / "ground_truth.json").read_text())
    assert row.loc["team_b/slow", "world_size"] == len(slow_truth["ranks"])
    for root in ("team_b/slow", "team_b/clean", "team_a/qwen3_step13"):
        shares = row.loc[root, ["compute_share", "exposed_communication_share", "idle_share"]]
        assert (shares >= 0).all() and shares.sum() <= 1 + 1e-9, shares
    assert row.loc["team_b/slow", "hccl_max_rank_skew_ratio"] >= row.loc["team_b/slow", "hccl_top_kind_rank_skew_ratio"]
    # the headline's largest non-compute cost: rank 0 of the Qwen3 capture waits in PP send/receive
    qwen = row.loc["team_a/qwen3_step13"]
    assert qwen["top_noncompute_cost"] == "exposed PP send_recv communication"
    assert str(qwen["top_noncompute_cost_ranks"]) == "0" and qwen["top_noncompute_cost_share"] == pytest.approx(
        0.39, abs=0.01
    )
    # the finding that costs the most: the planted slow rank, priced; a clean root has none
    assert row.loc["team_b/slow", "top_recoverable_finding"] == "slow_rank_suspected"
    assert float(row.loc["team_b/slow", "top_recoverable_ranks"]) == slow_truth["faults"][0]["ranks"][0]
    assert row.loc["team_b/slow", "top_recoverable_ms_per_step"] > 1.0
    assert pd.isna(row.loc["team_b/clean", "top_recoverable_finding"])
    assert not list(out.glob(".*work*")), "no half-written root dir is left behind"
    assert json.loads((out / "sweep_summary.json").read_text())["status_counts"] == {"ok": 4, "failed": 1}


def test_reuse_existing_skips_finished_roots_and_limit_caps(cli, swept, search_root, tmp_path):
    out = tmp_path / "archive"
    shutil.copytree(swept[1], out)  # the module's sweep, finished (a copy: this test writes into it)
    manifests = {p: p.stat().st_mtime_ns for p in out.glob("*/manifest.json")}
    run = cli("sweep", "--search-root", str(search_root), "-o", str(out), "--reuse-existing", "--progress", "none")
    assert run.result["reused_roots"] == 4  # the broken root is retried, the 4 finished ones are not
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/manifest.json")} == manifests
    # every analyze option applies to each root of a sweep
    options = ("--limit", "2", "--progress", "none", "--no-host-trace", "--mode", "full")
    limited = cli("sweep", "--search-root", str(search_root), "-o", str(tmp_path / "two"), *options)
    assert limited.result["root_count"] == 2
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "two").glob("*/manifest.json")]
    assert len(manifests) == 2
    assert all(m["options"]["host_trace"] is False and m["options"]["mode"] == "full" for m in manifests)
    assert len(list((tmp_path / "two").glob("*/report/report.html"))) == 2


def test_sweep_output_inside_the_search_root_is_not_analyzed_again(cli, search_root, tmp_path):
    inner = tmp_path / "search"
    shutil.copytree(search_root / "team_b" / "clean", inner / "clean")
    assert cli("sweep", "--search-root", str(inner), "-o", str(inner / "archive"), "--progress", "none").returncode == 0
    run = cli("sweep", "--search-root", str(inner), "-o", str(inner / "archive"), "--progress", "none")
    assert run.result["root_count"] == 1


def test_a_second_sweep_into_the_same_archive_is_refused(cli, tmp_path):
    from npuprof.pipeline.runner import run_lock

    search = tmp_path / "search"
    generate(search / "clean", "clean", seed=1, ranks=2, steps=2, trace=False)
    archive = tmp_path / "archive"
    archive.mkdir()
    with run_lock(archive):  # another sweep is writing it
        run = cli("sweep", "--search-root", str(search), "-o", str(archive), "--progress", "none")
    assert run.returncode == 2 and "being written by another npuprof run" in run.result["error"], run.stderr
    assert not [p for p in archive.iterdir() if p.is_dir()]  # nothing analyzed into it


def test_a_local_sweep_into_an_archive_a_service_sweep_writes_is_refused(cli, tmp_path):
    from npuprof.pipeline.sweep.service_mark import write_mark

    search = tmp_path / "search"
    generate(search / "clean", "clean", seed=1, ranks=2, steps=2, trace=False)
    archive = tmp_path / "archive"
    archive.mkdir()
    write_mark(archive, "0123abcd", "redis://:***@queue-host:6379/0")  # a service sweep planned into it
    run = cli("sweep", "--search-root", str(search), "-o", str(archive), "--progress", "none")
    assert run.returncode == 2, run.stderr
    assert run.result["error"].startswith(
        f"archive {archive} is being written by service sweep 0123abcd (broker redis://:***@queue-host:6379/0)"
    )
    assert "npuprof status 0123abcd --watch" in run.result["error"] and "Traceback" not in run.stderr
    assert not [p for p in archive.iterdir() if p.is_dir()]


def test_a_full_archive_fails_the_roots_it_cannot_hold_and_a_rerun_finishes(cli, tmp_path, small_filesystem):
    search = tmp_path / "search"
    for seed in range(4):
        generate(search / f"r{seed}", "clean", seed=seed, ranks=2, steps=3, trace=False)
    archive = small_filesystem
    run = cli("sweep", "--search-root", str(search), "-o", str(archive), "--jobs", "1", "--progress", "none")
    assert "Traceback" not in run.stderr
    landed = [p for p in root_dirs(archive) if (p / "manifest.json").exists()]
    if run.returncode == EXIT_PARTIAL:  # the rollup fit: every root ok or failed with the named error
        failed = run.result["failed_roots"] + run.result["roots_not_written"]
        assert failed and run.result["status_counts"].get("ok", 0) + len(failed) == 4
        assert all(f["error"].startswith(f"no space left on device writing {archive}") for f in failed), failed
    else:  # whether the rollup fits after the roots that did depends on bytes (path lengths): named too
        assert run.returncode == EXIT_NO_SPACE, run.stderr
        assert run.result["error"] == f"no space left on device writing the rollup into {archive}"
    assert len(landed) < 4, "the archive holds about two roots, not four"
    for out in root_dirs(archive):  # complete, or failed with its reason: never half
        assert (out / "manifest.json").exists() != (out / "failure.json").exists(), out
    assert not [p.name for p in archive.iterdir() if p.name.startswith(".")], "no work dir or temp file is left"
    subprocess.run(["mount", "-o", "remount,size=64m", str(archive)], check=True)  # space returns
    again = cli("sweep", "--search-root", str(search), "-o", str(archive), "--reuse-existing", "--progress", "none")
    assert again.returncode == 0, again.stderr
    assert again.result["status_counts"] == {"ok": 4} and again.result["reused_roots"] == len(landed)
