"""Accuracy table: every twin's predicted recoverable time against what the twin measures.

For each (scenario, finding type) of ``synth.twins.TWINS``: the planted root and its twin (the same
seed without the fault) are generated and analyzed; the finding's ``recoverable_ms_per_step`` is set
against the difference of the two mean step walls. The tests hold each within ±15 % at the test
seed; this prints the table for any seed (docs/user-guide.md, "Recoverable time", quotes seed 0).
Usage: ``python bench/twins.py [--seed 0] [--only SCENARIO] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import analyze
from npuprof.synth import SCENARIOS, generate
from npuprof.synth.twins import TWINS, twin_of


def mean_wall_ms(out: Path) -> float:
    return float(pd.read_csv(out / "step_summary.csv")["wall_ms"].mean())


def analyzed(scenario, seed: int, work: Path) -> Path:
    """The analysis dir of ``scenario`` at ``seed`` (generated and analyzed once per run)."""
    out = work / f"{scenario.name}_out"
    if not out.exists():
        root = Path(generate(work / scenario.name, scenario, seed=seed)["root"])
        analyze(root, out, jobs=2, options=AnalyzeOptions(hardware_model=scenario.card))
    return out


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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="one scenario's twins")
    parser.add_argument("--work", type=Path, help="where roots go (default: a temporary dir, removed)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="npuprof-twins-"))
    print("| scenario: finding | predicted ms/step | twin measures | error |\n|---|---|---|---|")
    try:
        for name, finding_type in TWINS:
            if args.only and name != args.only:
                continue
            planted = analyzed(SCENARIOS[name], args.seed, work)
            twin = analyzed(twin_of(name, finding_type), args.seed, work / finding_type)
            measured = mean_wall_ms(planted) - mean_wall_ms(twin)
            claimed = predicted(planted, finding_type)
            error = "not found" if claimed is None else f"{(claimed - measured) / measured:+.1%}"
            shown = "—" if claimed is None else f"{claimed:.2f}"
            print(f"| {name}: {finding_type} | {shown} | {measured:.2f} | {error} |", flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
