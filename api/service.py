"""Client side of the service: submit a sweep, ask its status, cancel it, fetch its results.

The client needs only the broker (Redis). It never walks the storage itself: planning runs on a
worker that mounts it. ``fetch`` copies from the archive when this machine mounts it too.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

from npuprof.pipeline import __version__
from npuprof.pipeline.errors import BadInput, NpuprofError, UsageError
from npuprof.pipeline.stages.base import AnalyzeOptions

EXIT_SERVICE_UNAVAILABLE = 6

FETCHABLE = ("analysis_summary.json", "report/analysis_summary.json", "report/report.md", "diagnosis_findings.json", "manifest.json",
             "step_summary.csv", "segment_manifest.json")
ROLLUP_FILES = ("sweep_class_rollup.csv", "sweep_summary.json")


class ServiceUnavailable(NpuprofError):
    """The broker cannot be reached."""

    exit_code = EXIT_SERVICE_UNAVAILABLE
    kind = "service_unavailable"


def _connect(broker: str | None):
    import os

    if broker:
        os.environ["NPUPROF_BROKER_URL"] = broker
    from npuprof.workers import records, settings
    from npuprof.workers.app import app

    if broker and app.conf.broker_url != broker:
        # the app caches its connection pool and result backend: drop them with the old URL
        app.conf.broker_url = broker
        app.conf.result_backend = broker
        app._local.__dict__.pop("backend", None)
        app._pool = None
        app.amqp._producer_pool = None
    try:
        records._client(settings.broker_url()).ping()
    except Exception as exc:  # redis raises several connection error types
        raise ServiceUnavailable(f"cannot reach the broker at {settings.broker_url()}: {exc}") from None
    return app, records, settings


def sweep_id_for(search_roots: list[str], archive: str, options: AnalyzeOptions) -> str:
    """The same sweep (roots, archive, options, version) always gets the same id."""
    text = json.dumps([sorted(str(Path(s).resolve()) for s in search_roots), str(Path(archive).resolve()), options.to_dict(), __version__])
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def submit(search_roots: list[str], archive: str, *, options: AnalyzeOptions = AnalyzeOptions(), queue: str | None = None,
           broker: str | None = None) -> dict:
    """Send a sweep; a sweep with the same id that is still running is not sent again."""
    app, records, settings = _connect(broker)
    from npuprof.workers.tasks import plan_sweep

    roots = [str(Path(s).resolve()) for s in search_roots]
    archive = str(Path(archive).resolve())
    sweep_id = sweep_id_for(roots, archive, options)
    existing = records.load(sweep_id)
    if existing and existing.get("state") in ("planning", "running"):
        return {"sweep_id": sweep_id, "state": existing["state"], "resubmitted": False}
    queue = queue or settings.queue_for(roots[0])
    record = {"sweep_id": sweep_id, "search_roots": roots, "archive": archive, "options": options.to_dict(), "queue": queue,
              "state": "planning", "submitted_at": time.time(), "roots": [], "npuprof_version": __version__,
              "plan_id": f"npuprof-plan-{sweep_id}-{int(time.time() * 1000)}"}
    records.save(record)
    plan_sweep.apply_async(args=(sweep_id, roots, archive, options.to_dict()), task_id=record["plan_id"], queue=queue)
    return {"sweep_id": sweep_id, "state": "planning", "resubmitted": existing is not None}


def _task_state(app, task_id: str) -> dict:
    result = app.AsyncResult(task_id)
    state = result.state
    info = result.info if isinstance(result.info, dict) else ({"error": str(result.info)} if result.info else {})
    return {"state": state, **({k: info[k] for k in ("stage", "percent", "status", "error") if k in info})}


def status(sweep_id: str, *, broker: str | None = None) -> dict:
    """Per-root state and progress, totals and failures of a sweep."""
    app, records, _ = _connect(broker)
    record = records.load(sweep_id)
    if record is None:
        raise UsageError(f"no sweep {sweep_id!r} is known to this broker")
    roots = []
    for entry in record.get("roots", []):
        if entry.get("reused"):
            roots.append({"root": entry["root"], "state": "REUSED"})
            continue
        if entry.get("failed_at_plan"):
            roots.append({"root": entry["root"], "state": "FAILURE", "error": entry["failed_at_plan"]})
            continue
        reduce = _task_state(app, entry["reduce_id"])
        ranks = [_task_state(app, t) for t in entry["rank_ids"]]
        done_ranks = sum(1 for r in ranks if r["state"] == "SUCCESS")
        state = reduce["state"]
        if state == "SUCCESS" and reduce.get("status") == "failed":
            state = "FAILURE"
        elif state == "PENDING" and any(r["state"] in ("STARTED", "PROGRESS", "SUCCESS", "RETRY") for r in ranks):
            state = "PROGRESS"
        percent = 100.0 if reduce["state"] == "SUCCESS" else round(sum(r.get("percent", 100.0 if r["state"] == "SUCCESS" else 0.0) for r in ranks) / max(len(ranks), 1) * 0.95, 1)
        row = {"root": entry["root"], "state": state, "percent": percent, "ranks_done": done_ranks, "ranks": len(ranks)}
        if state == "FAILURE":
            row["error"] = _failure_of(Path(record["archive"]) / entry["slug"]) or reduce.get("error")
        roots.append(row)
    totals: dict = {}
    for row in roots:
        totals[row["state"]] = totals.get(row["state"], 0) + 1
    merge = _task_state(app, record["merge_id"]) if record.get("merge_id") else {"state": "PENDING"}
    return {"sweep_id": sweep_id, "state": record["state"], "archive": record["archive"], "totals": totals, "merge": merge["state"],
            "roots": roots, "summary": record.get("summary")}


def _failure_of(out_dir: Path) -> str | None:
    path = out_dir / "failure.json"
    try:
        return json.loads(path.read_text())["error"] if path.exists() else None
    except (OSError, ValueError, KeyError):
        return None


def wait(sweep_id: str, *, timeout: float = 3600, poll: float = 1.0, broker: str | None = None, on_poll=None) -> dict:
    """Poll until the sweep is done (or the timeout passes); returns the final status.

    Without ``on_poll`` only the sweep record is read while waiting (one Redis read a poll, not one
    per task), so a waiting client does not load the broker of a large sweep.
    """
    _, records, _ = _connect(broker)
    deadline = time.monotonic() + timeout
    while True:
        if on_poll:
            current = status(sweep_id, broker=broker)
            on_poll(current)
            state = current["state"]
        else:
            record = records.load(sweep_id)
            if record is None:
                raise UsageError(f"no sweep {sweep_id!r} is known to this broker")
            state = record["state"]
        if state in ("done", "cancelled") or time.monotonic() > deadline:
            return status(sweep_id, broker=broker)
        time.sleep(poll)


def cancel(sweep_id: str, *, broker: str | None = None) -> dict:
    """Revoke every task of the sweep that has not run yet and mark the sweep cancelled."""
    app, records, _ = _connect(broker)
    record = records.load(sweep_id)
    if record is None:
        raise UsageError(f"no sweep {sweep_id!r} is known to this broker")
    ids = [record.get("plan_id"), record.get("merge_id")] + [i for e in record.get("roots", []) for i in (e.get("rank_ids", []) + [e.get("reduce_id")])]
    ids = [i for i in ids if i]
    app.control.revoke(ids)
    records.update(sweep_id, state="cancelled", cancelled_at=time.time())
    return {"sweep_id": sweep_id, "state": "cancelled", "revoked": len(ids)}


def fetch(sweep_id: str, dest: str, *, root: str | None = None, broker: str | None = None) -> dict:
    """Copy a sweep's rollup (and one root's summary files) from the archive to ``dest``.

    Only paths inside the sweep's archive dir are read, whatever the record or ``root`` say.
    """
    _, records, _ = _connect(broker)
    record = records.load(sweep_id)
    if record is None:
        raise UsageError(f"no sweep {sweep_id!r} is known to this broker")
    archive = Path(record["archive"]).resolve()
    if not archive.is_dir():
        raise UsageError(f"the archive {archive} is not mounted on this machine (fetch over SFTP is not built yet)")
    target = Path(dest)
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    sources = [archive / name for name in ROLLUP_FILES]
    if root is not None:
        entry = next((e for e in record.get("roots", []) if root in (e["root"], e["slug"]) or Path(e["root"]).name == root), None)
        if entry is None:
            raise UsageError(f"root {root!r} is not part of sweep {sweep_id}")
        sources += [archive / entry["slug"] / name for name in FETCHABLE]
    for source in sources:
        resolved = source.resolve()
        if archive not in resolved.parents:
            raise BadInput(source, "refusing to read outside the sweep's archive dir")
        if resolved.is_file():
            destination = target / resolved.relative_to(archive)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(resolved, destination)
            copied.append(str(destination))
    return {"sweep_id": sweep_id, "copied": copied}
