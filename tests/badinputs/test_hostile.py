"""The red-team corpus through the real CLI: each hostile root ends in a named error or a degraded
note, with no traceback and a peak memory under the bound."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from badinputs.hostile import HOSTILE, MEASURE, MEMORY_BOUND, Hostile


@pytest.mark.parametrize("case", HOSTILE, ids=[c.name for c in HOSTILE])
def test_a_hostile_root_ends_named_within_the_memory_bound(case: Hostile, tmp_path: Path):
    root = case.build(tmp_path)
    args = ["analyze", str(root), "-o", str(tmp_path / "out"), "--progress", "none", "--jobs", "1", *case.extra_args]
    tests_dir = str(Path(__file__).resolve().parents[1])
    measured = subprocess.run(
        [sys.executable, "-c", MEASURE, tests_dir, *args], capture_output=True, text=True, timeout=600
    )
    assert measured.returncode == 0, measured.stderr
    code, out, err, peak = json.loads(measured.stdout)
    assert "Traceback" not in err, err
    assert code == case.exit_code, (code, err)
    result = json.loads(out)
    said = " ".join([err, *result.get("warnings", []), *result.get("notes", [])])
    assert case.says in said, said
    assert peak < MEMORY_BOUND, f"peak RSS {peak / 1e6:.0f} MB"
