"""Every root of the bad-input corpus through the real CLI: the failure contract, or every row kept.

For a failure: no traceback, the documented exit code, exactly one JSON object on stdout, one
stderr line that names the file (and line), failure.json with the phase, no artifact of the failed
stage, the inputs byte-identical afterwards (no file added beside them either), user files intact.
For odd but valid data: exit 0, every row kept, or the rows dropped counted in a note.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from badinputs.corpus import CASES, Case
from conftest import run_cli

from npuprof.pipeline import schema
from npuprof.pipeline.errors import EXIT_DEGRADED

STAGE_ARTIFACTS = [schema.NORMALIZED_EVENTS.path, schema.stage_manifest_name("normalize"), schema.STEP_SEGMENTS.path]


def tree_state(root: Path) -> dict[bytes, str]:
    """What is under ``root``: the bytes of regular files, the kind (and target) of everything else.
    Never opens anything but regular files (a FIFO would block)."""
    state: dict[bytes, str] = {}
    base = os.fsencode(root)
    if not os.path.lexists(base):
        return state
    if not os.path.isdir(base):
        return {base: hashlib.sha256(Path(root).read_bytes()).hexdigest()}
    for current, dirnames, filenames in os.walk(base, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(current, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    state[path] = hashlib.sha256(handle.read()).hexdigest()
            elif stat.S_ISLNK(info.st_mode):
                state[path] = "link:" + os.fsdecode(os.readlink(path))
            else:
                state[path] = f"mode:{stat.S_IFMT(info.st_mode)}"
    return state


def run_case(case: Case, tmp_path: Path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    source = case.build(inputs)
    root_dir = source if source.is_dir() or not source.exists() else source.parent
    out = case.out(inputs, source) if case.out else tmp_path / "out" / "analysis"
    watched = tree_state(root_dir)
    user_files = tree_state(out) if case.out and out.is_dir() and out != root_dir else {}
    run = run_cli("analyze", os.fsdecode(source), "-o", str(out), "--progress", "none", *case.extra_args, timeout=120)
    return run, out, root_dir, watched, user_files


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_contract(case: Case, tmp_path: Path):
    run, out, root_dir, watched, user_files = run_case(case, tmp_path)
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout, run.stderr
    assert run.returncode == case.exit_code, (run.returncode, run.stderr)
    result = run.result  # exactly one JSON object
    assert tree_state(root_dir) == watched, "the inputs changed (or a file appeared beside them)"
    if user_files:
        after = tree_state(out)
        assert all(after.get(path) == digest for path, digest in user_files.items()), "a user file in OUT changed"
    if case.exit_code == 0:
        assert result["status"] == "ok"
        if case.events is not None:
            assert result["event_count"] == case.events
        text = " ".join(result.get("notes", []) + result.get("warnings", []))
        assert case.says in text, text
        return
    if case.exit_code == EXIT_DEGRADED:  # an auxiliary file: everything else is analyzed, and it is named
        assert result["status"] == "degraded"
        named = [w for w in result.get("warnings", []) if case.says in w and (case.names or "") in w]
        assert named, result.get("warnings")
        return
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert result["status"] == "failed" and result["exit_code"] == case.exit_code
    assert case.says in lines[0], lines[0]
    if case.names:
        assert case.names in lines[0], lines[0]
    if case.line is not None:
        assert f"line {case.line}" in lines[0], lines[0]
    if case.phase:
        assert result["phase"] == case.phase
    if case.exit_code == 3 and out.is_dir():
        failure = json.loads((out / schema.FAILURE_JSON).read_text())
        assert failure["phase"] and failure["error"] == result["error"]
        assert not [a for a in STAGE_ARTIFACTS if (out / a).exists()]


def test_the_corpus_is_large_and_names_are_unique():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)
