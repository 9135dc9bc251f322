"""Accuracy table: every twin's predicted recoverable time against what the twin measures.

For each (scenario, finding type) of ``synth.twins.TWINS``: the planted root is generated and analyzed
and its twin (the same seed without the fault) generated; the finding's ``recoverable_ms_per_step`` is
set against the difference of the two mean step walls the generator laid out (ground_truth.json, which
no part of the analysis computes). The tests hold each within ±15 % at the test seed; this prints the
table for any seeds, each seed's error and the worst (docs/user-guide.md, "Recoverable time", quotes it).
A finding that is a cause, not recoverable from the capture, has no row.
Usage: ``python bench/twins.py [--seeds 0,1,2,3,4] [--only SCENARIO] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from npuprof import knowledge
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import analyze
from npuprof.synth import SCENARIOS, generate
from npuprof.synth.twins import TWINS, twin_of


def truth_wall_ms(root: Path) -> float:
    """The mean step wall the generator laid out: every rank's every step of ground_truth.json."""
    truth = json.loads((root / "ground_truth.json").read_text())
    walls = [wall for rank in truth["ranks"].values() for wall in rank["step_wall_us"]]
    return sum(walls) / len(walls) / 1000.0


def generated(scenario, seed: int, work: Path) -> Path:
    """The root of ``scenario`` at ``seed`` (generated once per run)."""
    root = work / f"{scenario.name}_{seed}"
    if not root.exists():
        generate(root, scenario, seed=seed)
    return root


def analyzed(scenario, seed: int, work: Path) -> tuple[Path, Path]:
    """(root, analysis dir) of ``scenario`` at ``seed``, generated and analyzed once per run."""
    root = generated(scenario, seed, work)
    out = work / f"{scenario.name}_{seed}_out"
    if not out.exists():
        analyze(root, out, jobs=2, options=AnalyzeOptions(hardware_model=scenario.card))
    return root, out


def predicted(out: Path, finding_type: str) -> float | None:
    """The finding's recoverable time, merged symptoms included."""
    findings = json.loads((out / "diagnosis_findings.json").read_text())["diagnosis_findings"]
    for finding in findings:
        for told in [finding, *finding.get("merged", [])]:
            if told["finding_type"] == finding_type:
                return told.get("recoverable_ms_per_step")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--only", help="one scenario's twins")
    parser.add_argument("--work", type=Path, help="where roots go (default: a temporary dir, removed)")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    work = args.work or Path(tempfile.mkdtemp(prefix="npuprof-twins-"))
    causes = {t for t, rules in knowledge.load("diagnosis_rules")["findings"].items() if rules.get("not_recoverable")}
    columns = ["scenario: finding", f"predicted / twin ms, seed {seeds[0]}", *(f"error, seed {s}" for s in seeds)]
    columns += ["worst"] if len(seeds) > 1 else []
    print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    try:
        for name, finding_type in TWINS:
            if (args.only and name != args.only) or finding_type in causes:
                continue
            print(_row(name, finding_type, seeds, work), flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def _row(name: str, finding_type: str, seeds: list[int], work: Path) -> str:
    """One twin's table row: the first seed's predicted and measured ms, each seed's error, the worst."""
    cells, errors = [], []
    for seed in seeds:
        root, out = analyzed(SCENARIOS[name], seed, work)
        twin = generated(twin_of(name, finding_type), seed, work / finding_type)
        measured = truth_wall_ms(root) - truth_wall_ms(twin)
        claimed = predicted(out, finding_type)
        if not cells:
            cells.append(("—" if claimed is None else f"{claimed:.2f}") + f" / {measured:.2f}")
        error = None if claimed is None else (claimed - measured) / measured
        errors.append(error)
        cells.append("not found" if error is None else f"{error:+.1%}")
    if len(seeds) > 1:
        found = [e for e in errors if e is not None]
        cells.append("not found" if len(found) < len(errors) else f"{max(found, key=abs):+.1%}")
    return f"| {name}: {finding_type} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    main()
