"""Answers read back from the raw files: a number a finding prints is computed here again from the
capture's own files (communication.json, kernel_details.csv), independently of the pipeline, so a
number taken from the wrong rank, column or side fails here even when every table stays consistent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.planted import planted_finding

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

SUMMARY_OP = "Total Op Info"  # communication.json's per-step total, not an op


def collective_waits_ms(root: Path) -> dict[int, float]:
    """Per rank (profiler_info_<rank>.json names it), the Wait Time of every collective op in its
    communication.json, summed over the steps."""
    waits = {}
    for info in root.glob("*/profiler_info_*.json"):
        rank = int(info.stem.rsplit("_", 1)[1])
        steps = json.loads((info.parent / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
        waits[rank] = sum(
            op["Communication Time Info"]["Wait Time(ms)"]
            for step in steps.values()
            for name, op in step.get("collective", {}).items()
            if name != SUMMARY_OP
        )
    return waits


def test_the_slow_ranks_peers_wait_what_their_communication_files_say(planted_outputs):
    """slow_rank: 'the other ranks wait N ms for it' is the wait its peers' communication.json records in
    the collectives it arrived last at (all of them here), the slow rank's own not among it (±5 %)."""
    planted = planted_finding(planted_outputs, "slow_rank", "slow_rank_suspected")
    (slow,) = planted.fault["ranks"]
    assert planted.finding["metrics"]["votes"] == planted.finding["metrics"]["tested"]  # every collective voted
    waits = collective_waits_ms(planted.root)
    peers_ms = sum(ms for rank, ms in waits.items() if rank != slow)
    assert waits[slow] < 0.01 * peers_ms  # the late rank waits for nobody
    assert planted.finding["metrics"]["wait_ms"] == pytest.approx(peers_ms, rel=0.05)
