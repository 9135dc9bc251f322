"""Auxiliary inputs degrade, never fail: every file of a capture but its kernel source, broken in each
way real captures break (a wrong JSON type, NaN, binary garbage, truncation, UTF-16), leaves a
complete analysis marked degraded, with a note naming the rank, the file and the reason, and the
fallback the note promises; the other rank and an intact control stay as they were."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.auxiliary_files import CORRUPTIONS, FILES

from npuprof.pipeline import schema
from npuprof.pipeline.errors import EXIT_DEGRADED
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.sweep.rollup import root_rollup
from npuprof.synth import generate

# one worker runs the module: its module fixture is built once (xdist would build it again on each
# worker a test of it lands on, and again whenever modules interleave there)
pytestmark = pytest.mark.xdist_group("auxiliary_inputs")


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("aux_bases")
    return {
        name: Path(generate(base / name, name, seed=3, ranks=2, steps=3)["root"]) for name in ("clean", "host_bubble")
    }


def _rank_dir(root: Path, rank: int) -> Path:
    return sorted(p for p in root.iterdir() if p.is_dir())[rank]


def _summary(out: Path) -> dict:
    return json.loads((out / schema.ANALYSIS_SUMMARY).read_text())


# every file in every corruption, but deep nesting in trace_view.json: the streamed host trace needs a
# depth bound of its own (its reader builds a prefix per nesting level: memory grows with the square
# of the depth), which security issue IV item 2 owns
BROKEN = [(n, c) for n in sorted(FILES) for c in sorted(CORRUPTIONS) if (n, c) != ("trace_view.json", "deep")]


@pytest.mark.parametrize(("name", "corruption"), BROKEN)
def test_a_broken_auxiliary_file_degrades_the_root_and_says_so(bases, tmp_path, name, corruption):
    base, relative, fell_back = FILES[name]
    root = tmp_path / "root"
    shutil.copytree(bases[base], root)
    CORRUPTIONS[corruption](_rank_dir(root, 0) / relative)
    out = tmp_path / "out"
    result = analyze(root, out, jobs=1)
    assert result["status"] == "degraded", result.get("warnings")
    summary = _summary(out)
    notes = [text for text in summary["limitations"] if text.startswith(f"rank 0: {name} is unreadable (")]
    assert len(notes) == 1, summary["limitations"]
    assert "\n" not in notes[0] and not any("rank 1:" in text for text in summary["limitations"])
    assert fell_back(out), (name, corruption)
    assert (out / schema.REPORT_MD).is_file() and (out / schema.DIAGNOSIS_FINDINGS).is_file()
    row = root_rollup(str(root), "case", out)
    assert row["status"] == "ok" and row["analysis_status"] == "degraded" and name in row["degraded_reasons"]


def test_an_intact_capture_stays_ok_with_no_note(bases, tmp_path):
    for name, root in bases.items():
        result = analyze(root, tmp_path / name, jobs=1)
        assert result["status"] == "ok", (name, result.get("warnings"))
        assert not any("unreadable" in text for text in _summary(tmp_path / name)["limitations"])


def test_a_rank_without_kernels_and_a_broken_step_split_is_named(bases, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(bases["clean"], root)
    rank1 = _rank_dir(root, 1) / "ASCEND_PROFILER_OUTPUT"
    (rank1 / "kernel_details.csv").unlink()  # its time accounting would come from step_trace_time.csv
    (rank1 / "step_trace_time.csv").write_bytes(b"\x00\xff" * 64)
    result = analyze(root, tmp_path / "out", jobs=1)
    assert result["status"] == "degraded"
    assert any(
        text.startswith("rank 1: step_trace_time.csv is unreadable (")
        for text in _summary(tmp_path / "out")["limitations"]
    )


def test_the_cli_exits_degraded_with_the_note_on_stdout(cli, bases, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(bases["clean"], root)
    (_rank_dir(root, 0) / "ASCEND_PROFILER_OUTPUT" / "communication.json").write_text("[]", "utf-8")
    run = cli("analyze", str(root), "-o", str(tmp_path / "out"), "--progress", "none")
    assert run.returncode == EXIT_DEGRADED, run.stderr
    assert any("communication.json is unreadable (expected a JSON object" in w for w in run.result["warnings"])
    assert "Traceback" not in run.stderr


def test_a_symlinked_directory_that_is_not_followed_is_named(bases, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(bases["clean"], root)
    (root / "more").symlink_to(tmp_path, target_is_directory=True)  # a loop back above the root
    result = analyze(root, tmp_path / "out", jobs=1)
    assert result["rank_count"] == 2
    assert any(note.startswith(f"{root / 'more'}: a symlinked directory, not searched") for note in result["notes"])
