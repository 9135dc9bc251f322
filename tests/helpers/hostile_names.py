"""Kernel names that attack the report: a spreadsheet formula and an HTML script."""

from __future__ import annotations

import csv
from pathlib import Path

HOSTILE = {"formula": "=cmd|' /C calc'!A0", "script": "<script>alert(1)</script>"}


def plant_hostile_names(root: Path) -> None:
    """Rename two of rank 0's kernels to hostile text (an optimizer norm becomes a formula, the FFN
    activation a script)."""
    path = next(p for p in sorted(root.rglob("kernel_details.csv")))
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    name = rows[0].index("Name")
    targets = {"LpNormV2": HOSTILE["formula"], "SwiGlu": HOSTILE["script"]}
    for row in rows[1:]:
        for plain, hostile in targets.items():
            if row[name].endswith(plain):
                row[name] = hostile
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
