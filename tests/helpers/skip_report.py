"""A pytest plugin for the suite's own tests: after collection, print each test's id and whether it
is marked to skip (``-p helpers.skip_report`` with ``--collect-only``)."""

from __future__ import annotations


def pytest_collection_finish(session):
    for item in session.items:
        skipped = any(mark.name == "skip" for mark in item.iter_markers())
        print(f"SKIP-REPORT {'skip' if skipped else 'run'} {item.nodeid}")
