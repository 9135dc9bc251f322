"""Queue routing by storage: a root goes to the queue of the storage (path prefix) that holds it."""

from __future__ import annotations

from npuprof.workers import settings


def test_longest_matching_prefix_names_the_queue(monkeypatch):
    monkeypatch.setenv("NPUPROF_STORAGE_MAP", "lustre=/mnt/lustre,scratch=/mnt/lustre/scratch,nfs=/mnt/nfs/")
    assert settings.queue_for("/mnt/lustre/team/run1") == "storage.lustre"
    assert settings.queue_for("/mnt/lustre/scratch/run2") == "storage.scratch"
    assert settings.queue_for("/mnt/nfs") == "storage.nfs"
    assert settings.queue_for("/mnt/lustre2/run") == settings.DEFAULT_QUEUE  # a prefix matches whole path parts only
    assert settings.queue_for("/home/me/run") == settings.DEFAULT_QUEUE


def test_no_map_means_the_default_queue(monkeypatch):
    monkeypatch.delenv("NPUPROF_STORAGE_MAP", raising=False)
    assert settings.queue_for("/anything") == "npuprof"
