"""Writes never follow links already in an output: ``--overwrite`` over a linked artifact and ``fetch -o``
into a dir holding planted links leave the links' targets untouched."""

from __future__ import annotations

import shutil

import pytest
from conftest import run_cli

from npuprof.api.service import _fetch_local
from npuprof.pipeline.errors import BadInput
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
