"""The supervisor's own watchdog: a running sweep whose merge stopped looking gets a new one.

``merge_sweep`` supervises a sweep by sending itself again every second. That next-look message can
vanish when the broker restarts while a worker holds it (an ETA message in the worker's memory and in
the broker's unacknowledged set, not in the queue), and nothing in Celery notices. So every look leaves
a timestamp (``records.looked``), and anyone who asks after the sweep — a client's status or wait, a
root's reduce as it lands — sends a new generation of the merge when the last look is
``merge_stale_seconds`` old. Older generations stop at their next look; a claim keeps two askers from
reviving it twice.
"""

from __future__ import annotations

import time
from typing import Any

from npuprof.workers import records, settings


def is_stale(record: dict, last_look: float | None, now: float, stale_after: float) -> bool:
    """Whether a sweep's supervisor is to be taken for lost: the sweep runs and neither its merge
    looked nor was it planned within ``stale_after`` seconds."""
    if record.get("state") != "running" or not record.get("merge_id"):
        return False
    return now - max(last_look or 0.0, record.get("planned_at") or 0.0) >= stale_after


def revive_if_stale(app: Any, sweep_id: str, url: str | None = None, record: dict | None = None) -> bool:
    """Send the sweep's merge again (a new generation) when it is stale; True when this call did.

    Cheap when it is not: one read of the last look (the record is loaded only for a stale one)."""
    stale_after = settings.merge_stale_seconds()
    now = time.time()
    last = records.last_look(sweep_id, url)
    if last is not None and now - last < stale_after:
        return False
    record = record or records.load(sweep_id, url)
    if record is None or not is_stale(record, last, now, stale_after):
        return False
    if not records.claim(f"revive-merge:{sweep_id}", stale_after, url):
        return False
    generation = records.next_merge_generation(sweep_id, url)
    records.looked(sweep_id, url)  # the sent copy is given a stale time of its own to take its first look
    app.send_task(
        "npuprof.merge_sweep",
        args=(sweep_id, generation),
        task_id=record["merge_id"],
        queue=record.get("queue") or settings.DEFAULT_QUEUE,
    )
    return True
