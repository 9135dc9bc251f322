"""Plausible bugs, each with the test that must catch it: the issue's audit (the six it found alive) and
more of our choosing. Each is one edit of one file; ``python tests/helpers/mutation_catalogue.py``
applies each in a scratch copy of the package and runs its named tests there, and reports which the tests
killed (docs/development.md, "Mutation testing", holds the last run). tests/test_mutation_floor.py checks
that every edit still applies to the code as it is and names tests that exist.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = ("api", "pipeline", "knowledge", "synth", "workers", "deploy")


@dataclass(frozen=True)
class Mutation:
    key: str
    bug: str  # the wrong answer it gives
    path: str  # the file it edits (repository-relative)
    old: str  # text found exactly once in it
    new: str
    tests: tuple[str, ...]  # node ids that must fail


MUTATIONS: tuple[Mutation, ...] = (
    # the audit's survivors (issue 72)
    Mutation(
        "ledger-drops-overlap",
        "the ledger loses its 'compute under communication' line (its ms land on 'not accounted')",
        "pipeline/stages/diagnostics/ledger.py",
        'parts = [primary[primary["category"] == "overlap"].assign(line=names["overlap"])]',
        'parts = [primary[primary["category"] == "no such category"].assign(line=names["overlap"])]',
        ("tests/test_ledger.py::test_the_ledger_adds_up_to_the_step_on_every_scenario[clean]",),
    ),
    Mutation(
        "slow-rank-waits-for-itself",
        "the slow rank's 'the others wait' sums its own lateness (0.00 ms) instead of its peers'",
        "pipeline/stages/diagnostics/detectors/slow_rank.py",
        'others = usable[(usable["rank_id"] != rank) & usable["alignment_id"].isin(own["alignment_id"])]',
        'others = usable[(usable["rank_id"] == rank) & usable["alignment_id"].isin(own["alignment_id"])]',
        ("tests/test_answers_from_raw.py",),
    ),
    Mutation(
        "slow-link-at-0.3",
        "a link is slow only under 30 % of its peers' bandwidth (one at 40 % is not named)",
        "knowledge/detectors/slow_link/rules.yaml",
        "bandwidth_ratio_max: 0.5",
        "bandwidth_ratio_max: 0.3",
        ("tests/test_thresholds_at_edge.py::test_a_link_is_slow_under_half_the_bandwidth_of_comparable_links",),
    ),
    Mutation(
        "slow-rank-at-fastest-peer",
        "a slow rank is priced at its fastest peer's pace, not its peers' median",
        "pipeline/stages/diagnostics/retiming.py",
        'peers = slots[slots["rank_id"] != rank].groupby("last")["tail_us"].median()',
        'peers = slots[slots["rank_id"] != rank].groupby("last")["tail_us"].min()',
        ("tests/test_recoverable.py::test_a_slow_rank_is_priced_at_its_peers_median_not_the_fastest_peer",),
    ),
    Mutation(
        "robust-z-at-35",
        "a late member of a large group is voted only past a robust z of 35",
        "knowledge/detectors/slow_rank/rules.yaml",
        "robust_z_min: 3.5",
        "robust_z_min: 35",
        (
            "tests/test_thresholds_at_edge.py::test_a_late_member_of_sixteen_is_voted_past_a_robust_z_of_three_and_a_half",
        ),
    ),
    Mutation(
        "csv-guard-without-cr",
        "a cell led by a carriage return reaches a CSV view unguarded",
        "pipeline/csv_formulas.py",
        'FORMULA_LEADS = "=+-@\\t\\r"',
        'FORMULA_LEADS = "=+-@\\t"',
        ("tests/test_csv_formulas.py::test_formula_safe_leaves_numbers_and_plain_text_alone",),
    ),
    # ours
    Mutation(
        "dixon-at-its-critical-value",
        "a Q equal to its critical value is voted an outlier",
        "pipeline/stages/diagnostics/outliers.py",
        'result["outlier"] = (result["statistic"] > result["threshold"])',
        'result["outlier"] = (result["statistic"] >= result["threshold"])',
        ("tests/test_outliers.py::test_the_q_at_its_critical_value_is_not_above_it",),
    ),
    Mutation(
        "mad-unscaled",
        "the robust z divides by the raw MAD, not the MAD scaled to a standard deviation",
        "pipeline/stages/diagnostics/outliers.py",
        "MAD_TO_SIGMA = 1.4826",
        "MAD_TO_SIGMA = 1.0",
        ("tests/test_outliers.py::test_a_large_group_uses_the_robust_z",),
    ),
    Mutation(
        "credit-ignores-the-block",
        "a kernel finding's ledger credit is spread over every compute line, not the block its kernels ran in",
        "pipeline/stages/diagnostics/ledger_credit.py",
        "TIERS = (_same_collective, _own_line, _eligible_work,",
        "TIERS = (_same_collective, _eligible_work,",
        (
            "tests/test_ledger_credit.py::test_cut_kernels_work_goes_to_the_line_they_ran_on_before_the_other_eligible_ones",
            "tests/test_ledger.py::test_the_real_loss_chains_compute_credit_is_outside_the_layers",
        ),
    ),
    Mutation(
        "estimate-counted-twice",
        "an analytic estimate on a rank with no room left is placed whole on every one of its steps",
        "pipeline/stages/diagnostics/ledger_credit.py",
        'share = np.where(total > 0, per_step["capacity"] / total.where(total > 0, 1.0), 1.0 / count)',
        'share = np.where(total > 0, per_step["capacity"] / total.where(total > 0, 1.0), 1.0)',
        ("tests/test_ledger_credit.py::test_an_analytic_estimate_spreads_over_each_ranks_steps_by_their_room",),
    ),
    Mutation(
        "window-before-its-block",
        "a kernel at its block's first µs is booked outside the block (and an event at a step's first µs outside it)",
        "pipeline/stages/diagnostics/retiming.py",
        'at = np.searchsorted(own["start_us"].to_numpy(), starts[mask], side="right") - 1',
        'at = np.searchsorted(own["start_us"].to_numpy(), starts[mask], side="left") - 1',
        ("tests/test_ledger_credit.py::test_a_kernel_window_is_booked_on_the_block_it_starts_in",),
    ),
    Mutation(
        "credit-on-communication-work",
        "local work a replay removed is credited to communication lines too",
        "pipeline/stages/diagnostics/ledger_credit.py",
        'return (pairs["part"] == "work") & pairs["category"].isin(WORK_CATEGORIES)',
        'return pairs["part"] == "work"',
        (
            "tests/test_ledger_credit.py::test_work_no_rule_names_lands_on_any_compute_or_idle_line_never_on_communication",
        ),
    ),
    Mutation(
        "blame-the-first-arriver",
        "a wait is blamed on the member that arrived first, not last",
        "pipeline/stages/diagnostics/ledger.py",
        'last = rows.loc[rows.groupby("alignment_id")["late_by_us"].idxmin(), ["alignment_id", "rank_id"]]',
        'last = rows.loc[rows.groupby("alignment_id")["late_by_us"].idxmax(), ["alignment_id", "rank_id"]]',
        ("tests/test_ledger.py::test_an_unexplained_wait_is_blamed_on_the_member_that_arrived_last",),
    ),
    Mutation(
        "loss-fused-in-two-passes",
        "a fused loss is priced as reading the logits twice, not four times (its saving overstated)",
        "knowledge/detectors/loss_chain/rules.yaml",
        "passes: 4",
        "passes: 2",
        ("tests/test_loss_chain.py::test_without_the_fused_loss_four_passes_over_the_logits_price_it",),
    ),
    Mutation(
        "storage-without-links",
        "a task path through a symlink out of the served storage is accepted",
        "workers/storage.py",
        "resolved = Path(os.path.realpath(text))",
        "resolved = Path(os.path.abspath(text))",
        ("tests/test_worker_storage.py::test_paths_that_leave_the_served_storage_are_refused",),
    ),
    Mutation(
        "storage-by-string-prefix",
        "a sibling dir whose name starts with the served dir's is accepted",
        "pipeline/input_files.py",
        "return any(path == base or base in path.parents for base in dirs)",
        "return any(str(path).startswith(str(base)) for base in dirs)",
        ("tests/test_worker_storage.py::test_paths_that_leave_the_served_storage_are_refused",),
    ),
    Mutation(
        "write-in-place",
        "an artifact is written straight onto its name: a failed write leaves a half file looking complete",
        "pipeline/io.py",
        "    tmp = scratch / target.name\n",
        "    tmp = target\n",
        ("tests/test_links_in_outputs.py::test_a_failed_write_leaves_neither_the_artifact_nor_its_scratch_dir",),
    ),
    Mutation(
        "idle-capture-much-stricter",
        "only a capture busy under 0.01 % of its step, or of under 5 kernels, is an idle capture",
        "knowledge/diagnosis_rules.yaml",
        "idle_capture: {busy_share_max: 0.10, kernels_min: 50}",
        "idle_capture: {busy_share_max: 0.0001, kernels_min: 5}",
        (
            "tests/test_capture_health.py::test_a_26_kernel_fragment_is_an_idle_capture_and_no_confident_finding_claims_its_idle",
        ),
    ),
    Mutation(
        "read-back-strips-every-apostrophe",
        "reading a CSV view back drops a value's own leading apostrophes with the one the guard added",
        "pipeline/csv_formulas.py",
        """frame[column] = frame[column].where(~led, frame[column].astype("str").str.slice(1))""",
        """frame[column] = frame[column].where(~led, frame[column].astype("str").str.lstrip("'"))""",
        ("tests/test_csv_formulas.py::test_a_csv_view_leads_formulas_in_every_text_column_kind_and_reads_back_raw",),
    ),
    Mutation(
        "ten-members-robust-z",
        "a group of ten takes the robust z though Dixon's table covers it",
        "pipeline/stages/diagnostics/outliers.py",
        "dixon = counts <= max(q_critical)",
        "dixon = counts < max(q_critical)",
        ("tests/test_outliers.py::test_ten_members_still_take_dixons_q",),
    ),
    Mutation(
        "kernel-windows-forgotten",
        "a chain finding's windows are not kept: its credit is spread over every compute line",
        "pipeline/stages/diagnostics/step_scale.py",
        "close_windows(inputs.step_model, windows, kernels=True)",
        "close_windows(inputs.step_model, windows)",
        ("tests/test_ledger.py::test_a_kernel_findings_compute_credit_is_on_the_block_its_kernels_ran_in",),
    ),
    Mutation(
        "tail-saving-lost",
        "idle closed after a step's last collective saves nothing",
        "pipeline/stages/diagnostics/retiming.py",
        "np.add.at(change.tail_cut_us, slot[in_tail], cut[in_tail])",
        "np.add.at(change.tail_cut_us, slot[in_tail], 0.0 * cut[in_tail])",
        ("tests/test_recoverable.py::test_the_replay_of_a_hand_built_step",),
    ),
)


def scratch_package(work: Path) -> Path:
    """The package as a plain ``npuprof`` package under ``work`` (mutmut and an edited copy import it
    from the path, ahead of the editable install's mapping of the repository's folders), with the tests
    beside it; returns ``work``."""
    package = work / "npuprof"
    package.mkdir(parents=True)
    for folder in PACKAGE_FOLDERS:
        shutil.copytree(REPO / folder, package / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "__init__.py").write_text('"""npuprof, copied for a mutation run."""\n')
    shutil.copytree(REPO / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", work / "pyproject.toml")
    return work


def apply(mutation: Mutation, work: Path) -> None:
    """Edit the scratch copy under ``work``; the edit's text must occur exactly once."""
    target = work / "npuprof" / mutation.path
    text = target.read_text("utf-8")
    if text.count(mutation.old) != 1:
        raise ValueError(f"{mutation.key}: {mutation.old!r} occurs {text.count(mutation.old)} times in {mutation.path}")
    target.write_text(text.replace(mutation.old, mutation.new), "utf-8")


def killed(mutation: Mutation) -> tuple[bool, float]:
    """Whether the mutation's tests fail against it (run from a scratch copy), and how long they took."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutation.key}-") as scratch:
        work = scratch_package(Path(scratch))
        apply(mutation, work)
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTHONPATH")}
        env.setdefault("NPUPROF_SAMPLES", str(REPO.parent / "shared" / "samples"))
        env["PYTHONPATH"] = str(work)
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", *mutation.tests],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        return run.returncode == 1, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Apply each catalogued bug to a copy and run the tests named to catch it."
    )
    parser.add_argument("keys", nargs="*", help="only these mutations (default: all)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.keys or m.key in args.keys]
    survivors = []
    for mutation in chosen:
        dead, seconds = killed(mutation)
        print(
            f"{'killed ' if dead else 'SURVIVED'} {mutation.key:32s} {seconds:6.1f} s  {mutation.tests[0]}", flush=True
        )
        survivors += [] if dead else [mutation.key]
    print(f"{len(chosen) - len(survivors)} of {len(chosen)} killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
