"""Writes never follow links already in an output: ``--overwrite`` over a linked artifact, ``fetch -o``
into a dir holding planted links, and links planted where a temp file or a sweep's work dir would go
leave the links' targets untouched."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import run_cli

from npuprof.api.service import _fetch_local
from npuprof.pipeline import io
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.sweep.local import analyze_into
from npuprof.synth import generate


def test_overwrite_replaces_a_linked_artifact_dir_and_leaves_its_target_alone(tmp_path):
    root, out = tmp_path / "root", tmp_path / "out"
    generate(root, "clean", ranks=2, steps=4, layers=4, seed=0, trace=False)
    assert run_cli("analyze", str(root), "-o", str(out), "--progress", "none").returncode == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    events = out / "normalized_events"
    linked = sorted(p.name for p in events.iterdir())
    for part in events.iterdir():
        shutil.rmtree(part)
    events.rmdir()
    events.symlink_to(victim)
    again = run_cli("analyze", str(root), "-o", str(out), "--progress", "none", "--overwrite")
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"] and (victim / "keep.txt").read_text() == "keep"
    assert not events.is_symlink() and sorted(p.name for p in events.iterdir()) == linked


def test_fetch_replaces_planted_links_and_refuses_to_write_through_a_linked_dir(tmp_path):
    archive, dest = tmp_path / "archive", tmp_path / "dest"
    (archive / "root_a").mkdir(parents=True)
    (archive / "sweep_summary.json").write_text('{"fetched": true}')
    (archive / "root_a" / "report.md").write_text("# report")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    dest.mkdir()
    (dest / "sweep_summary.json").symlink_to(victim)
    copied = _fetch_local(archive.resolve(), ["sweep_summary.json"], dest)
    assert copied == [str(dest / "sweep_summary.json")]
    assert victim.read_text() == "precious"
    assert not (dest / "sweep_summary.json").is_symlink() and "fetched" in (dest / "sweep_summary.json").read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (dest / "root_a").symlink_to(elsewhere)
    with pytest.raises(BadInput, match="is a link in the destination"):
        _fetch_local(archive.resolve(), ["root_a/report.md"], dest)
    assert not any(elsewhere.iterdir())


def test_an_artifact_is_never_written_through_a_link_planted_at_a_guessable_temp_name(tmp_path):
    """Before Dec 7 an artifact went to ``.<name>.<pid>.tmp`` beside it: a link planted there (issue 71:
    ``.diagnosis_findings.json.<pid>.tmp``) was written through. Now the temp file is in a new dir of a
    random name, made for the write alone (0700), and removed after."""
    out, victim = tmp_path / "out", tmp_path / "victim.json"
    out.mkdir()
    victim.write_text("precious")
    for name in (f".diagnosis_findings.json.{os.getpid()}.tmp", ".diagnosis_findings.json.tmp"):
        (out / name).symlink_to(victim)
    seen = []

    def writer(tmp):
        seen.append((tmp.name, oct(tmp.parent.stat().st_mode & 0o777), tmp.parent.parent == out))
        tmp.write_text('{"written": true}')

    io.write_with(out / "diagnosis_findings.json", writer)
    assert victim.read_text() == "precious"
    assert (out / "diagnosis_findings.json").read_text() == '{"written": true}'
    assert seen == [("diagnosis_findings.json", "0o700", True)]  # the target's own name, a private dir
    left = sorted(p.name for p in out.iterdir())
    assert len(left) == 3 and "diagnosis_findings.json" in left  # the scratch dir is gone; the links stay


def test_a_failed_write_leaves_neither_the_artifact_nor_its_scratch_dir(tmp_path):
    def writer(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        io.write_with(tmp_path / "report.md", writer)
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_never_analyzes_into_a_link_planted_at_its_work_dir(tmp_path):
    """A local sweep's work dir is ``.<root>.work-<pid>`` beside the final one: a link planted there is
    removed and the dir made anew, so the analysis never lands in the link's target."""
    root, archive, victim = tmp_path / "root", tmp_path / "archive", tmp_path / "victim"
    generate(root, "clean", ranks=2, steps=4, layers=4, seed=0, trace=False)
    archive.mkdir()
    victim.mkdir()
    (archive / f".root_a.work-{os.getpid()}").symlink_to(victim)
    result = analyze_into(str(root), str(archive / "root_a"), {})
    assert result["status"] == "ok", result
    assert list(victim.iterdir()) == []
    assert (archive / "root_a" / "manifest.json").is_file() and not (archive / "root_a").is_symlink()
