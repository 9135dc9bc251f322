"""Client side of the service: submit a sweep, ask its status, cancel it, fetch its results.

The client needs only the broker (Redis). It never walks the storage itself: planning runs on a
worker that mounts it. ``fetch`` copies from the archive when this machine mounts it too.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# only light imports here: `npuprof status` runs again and again (watch loops, scripts) and needs
# Redis and Celery, not pandas, Arrow and the stages
from npuprof.pipeline import __version__
from npuprof.pipeline.errors import BadInput, ServiceUnavailable, UsageError
from npuprof.pipeline.options import AnalyzeOptions

SERVICE_EXTRA_HINT = "the service needs its extra: pip install 'npuprof[service]'"


def require_service_extra(*modules: str) -> None:
    """One clear line instead of a traceback when the service extra (celery, redis, flower) is missing."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ServiceUnavailable(f"{SERVICE_EXTRA_HINT} ({exc})") from None


@dataclass
class Connection:
    """A client's handle on one broker: a Celery app built for it, and its URL."""

    app: Any
    url: str

    def load(self, sweep_id: str) -> dict:
        """The sweep's record, or UsageError when this broker does not know it."""
        from npuprof.workers import records

        record = records.load(sweep_id, self.url)
        if record is None:
            from npuprof.workers.settings import redacted

            raise UsageError(f"no sweep {sweep_id!r} is known to the broker at {redacted(self.url)}")
        return record


def _connect(broker: str | None) -> Connection:
    """An app for ``broker`` (default: NPUPROF_BROKER_URL), after one ping that proves it is reachable."""
    try:
        from npuprof.workers import records, settings
        from npuprof.workers.app import make_app
    except ImportError as exc:  # celery / redis are the service extra, not core dependencies
        raise ServiceUnavailable(f"{SERVICE_EXTRA_HINT} ({exc})") from None
    url = broker or settings.broker_url()
    try:
        records._client(url).ping()
    except Exception as exc:  # redis raises several connection error types
        raise ServiceUnavailable(
            f"cannot reach the broker at {settings.redacted(url)}: {settings.redacted(str(exc))}"
        ) from None
    return Connection(make_app(url), url)


def sweep_id_for(search_roots: list[str], archive: str, options: AnalyzeOptions) -> str:
    """The same sweep (roots, archive, options, version) always gets the same id."""
    text = json.dumps(
        [
            sorted(str(Path(s).resolve()) for s in search_roots),
            str(Path(archive).resolve()),
            options.to_dict(),
            __version__,
        ]
    )
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def submit(
    search_roots: list[str],
    archive: str,
    *,
    options: AnalyzeOptions = AnalyzeOptions(),
    queue: str | None = None,
    broker: str | None = None,
    series_key: str | None = None,
) -> dict:
    """Send a sweep; a sweep with the same id that is still running is not sent again. ``series_key``
    orders the roots of a series for the merge's trends (it does not change the sweep's id)."""
    conn = _connect(broker)
    from npuprof.workers import records, settings

    roots = [str(Path(s).resolve()) for s in search_roots]
    archive = str(Path(archive).resolve())
    # the workers read the files options name from the shared storage, never from this client's cwd
    named = {k: str(Path(v).resolve()) for k in ("model_config", "hardware_profile") if (v := getattr(options, k))}
    options = replace(options, **named)
    sweep_id = sweep_id_for(roots, archive, options)
    existing = records.load(sweep_id, conn.url)
    if existing and existing.get("state") in records.ACTIVE:
        return {"sweep_id": sweep_id, "state": existing["state"], "resubmitted": False}
    others = [r for r in records.active_on(archive, conn.url) if r["sweep_id"] != sweep_id]
    if others:  # two sweeps writing one archive would interleave roots and race for the rollup
        other = others[0]
        raise UsageError(
            f"archive {archive} is being written by sweep {other['sweep_id']} ({other['state']}): wait for it "
            f"(npuprof status {other['sweep_id']} --watch), cancel it, or give another -o"
        )
    queue = queue or settings.queue_for(roots[0])
    record = {
        "sweep_id": sweep_id,
        "search_roots": roots,
        "archive": archive,
        "options": options.to_dict(),
        "queue": queue,
        "state": "planning",
        "submitted_at": time.time(),
        "roots": [],
        "npuprof_version": __version__,
        "plan_id": f"npuprof-plan-{sweep_id}-{int(time.time() * 1000)}",
        "series_key": series_key,
    }
    records.save(record, conn.url)
    conn.app.send_task(
        "npuprof.plan_sweep", args=(sweep_id, roots, archive, options.to_dict()), task_id=record["plan_id"], queue=queue
    )
    return {"sweep_id": sweep_id, "state": "planning", "resubmitted": existing is not None}


def _task_state(app, task_id: str) -> dict:
    result = app.AsyncResult(task_id)
    state = result.state
    info = result.info if isinstance(result.info, dict) else ({"error": str(result.info)} if result.info else {})
    return {"state": state, **({k: info[k] for k in ("stage", "percent", "status", "error") if k in info})}


def status(sweep_id: str, *, broker: str | None = None) -> dict:
    """Per-root state and progress, totals and failures of a sweep."""
    conn = _connect(broker)  # first: it names a missing service extra
    from npuprof.workers import merge_watch

    app = conn.app
    record = conn.load(sweep_id)
    merge_watch.revive_if_stale(app, sweep_id, conn.url, record)  # a supervisor lost in a broker restart
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
        percent = (
            100.0
            if reduce["state"] == "SUCCESS"
            else round(
                sum(r.get("percent", 100.0 if r["state"] == "SUCCESS" else 0.0) for r in ranks)
                / max(len(ranks), 1)
                * 0.95,
                1,
            )
        )
        row = {"root": entry["root"], "state": state, "percent": percent, "ranks_done": done_ranks, "ranks": len(ranks)}
        if state == "FAILURE":
            from npuprof.pipeline import io

            failure = io.read_failure(Path(record["archive"]) / entry["slug"]) or {}
            row["error"] = failure.get("error") or reduce.get("error")
        roots.append(row)
    totals: dict = {}
    for row in roots:
        totals[row["state"]] = totals.get(row["state"], 0) + 1
    merge = _task_state(app, record["merge_id"]) if record.get("merge_id") else {"state": "PENDING"}
    if merge["state"] == "RETRY":  # the merge supervises the sweep, looking again every few seconds
        merge["state"] = "WAITING"
    return {
        "sweep_id": sweep_id,
        "state": record["state"],
        "archive": record["archive"],
        "totals": totals,
        "merge": merge["state"],
        "roots": roots,
        "summary": record.get("summary"),
        **({k: record[k] for k in ("error", "exit_code") if k in record}),  # a sweep that failed as a whole
    }


def wait(sweep_id: str, *, timeout: float = 3600, poll: float = 1.0, broker: str | None = None, on_poll=None) -> dict:
    """Poll until the sweep is done (or the timeout passes); returns the final status.

    Without ``on_poll`` only the sweep record is read while waiting (one Redis read a poll, not one
    per task), so a waiting client does not load the broker of a large sweep.
    """
    conn = _connect(broker)  # first: it names a missing service extra
    from npuprof.workers import merge_watch, records

    deadline = time.monotonic() + timeout
    while True:
        if on_poll:
            current = status(sweep_id, broker=broker)
            on_poll(current)
            state = current["state"]
        else:
            record = conn.load(sweep_id)
            merge_watch.revive_if_stale(conn.app, sweep_id, conn.url, record)
            state = record["state"]
        if state in records.FINISHED or time.monotonic() > deadline:
            return status(sweep_id, broker=broker)
        time.sleep(poll)


def _task_ids(record: dict) -> list[str]:
    """Every task id of a sweep: its plan, its roots' rank and reduce tasks, its merge."""
    ids = [record.get("plan_id"), record.get("merge_id")] + [
        i for e in record.get("roots", []) for i in (e.get("rank_ids", []) + [e.get("reduce_id")])
    ]
    return [i for i in ids if i]


def cancel(sweep_id: str, *, broker: str | None = None) -> dict:
    """Revoke every task of the sweep that has not run yet and mark the sweep cancelled."""
    from npuprof.workers import records

    conn = _connect(broker)
    record = conn.load(sweep_id)
    if record.get("state") in records.FINISHED:  # nothing left to revoke: say so, change nothing
        return {
            "sweep_id": sweep_id,
            "state": record["state"],
            "revoked": 0,
            "note": f"the sweep was already {record['state']}",
        }
    ids = _task_ids(record)
    conn.app.control.revoke(ids)
    records.update(sweep_id, conn.url, state="cancelled", cancelled_at=time.time())
    if Path(record["archive"]).is_dir():  # mounted here: a local sweep may write the archive again
        from npuprof.pipeline.sweep import service_mark

        service_mark.clear_mark(Path(record["archive"]), sweep_id)
    return {"sweep_id": sweep_id, "state": "cancelled", "revoked": len(ids)}


def forget(sweep_id: str, *, broker: str | None = None) -> dict:
    """Drop a finished or cancelled sweep's record and task results from Redis (the archive stays)."""
    from npuprof.workers import records

    conn = _connect(broker)
    record = conn.load(sweep_id)
    if record.get("state") in records.ACTIVE:
        raise UsageError(f"sweep {sweep_id} is {record['state']}: cancel it first (npuprof cancel {sweep_id})")
    ids = _task_ids(record)
    records.forget_results(conn.app, ids)
    records.delete(sweep_id, conn.url, claims=[e["reduce_id"] for e in record.get("roots", []) if "reduce_id" in e])
    queued = records.drop_queued(sweep_id, conn.url)
    return {
        "sweep_id": sweep_id,
        "state": "forgotten",
        "results_dropped": len(ids),
        "messages_dropped": queued,
        "archive": record["archive"],
    }


def _fetch_paths(record: dict, sweep_id: str, root: str | None) -> list[str]:
    """Paths, relative to the archive, that a fetch copies: the sweep's tables, report and datasets
    (``sweep_files``), and one root's summary files."""
    from npuprof.pipeline import schema
    from npuprof.pipeline.sweep.datasets import sweep_files

    paths = sweep_files()
    if root is not None:
        entries = record.get("roots", [])
        exact = [e for e in entries if root in (e["root"], e["slug"])]
        matches = exact or [e for e in entries if Path(e["root"]).name == root]
        if not matches:
            slugs = ", ".join(e["slug"] for e in entries[:10]) + (", …" if len(entries) > 10 else "")
            raise UsageError(f"root {root!r} is not part of sweep {sweep_id}; its roots: {slugs or 'none'}")
        if len(matches) > 1:  # a dir name many roots share: copying one of them would be a guess
            slugs = ", ".join(e["slug"] for e in matches)
            raise UsageError(f"root {root!r} names {len(matches)} roots of sweep {sweep_id} ({slugs}): pass a slug")
        paths += [f"{matches[0]['slug']}/{name}" for name in schema.FETCHABLE]
    return paths


def _fetch_local(archive: Path, paths: list[str], target: Path) -> list[str]:
    """Copy ``paths`` of ``archive`` into ``target`` (each through a temp file and a rename: a link
    already in ``target`` is replaced, never written through)."""
    from npuprof.pipeline import io

    copied = []
    for relative in paths:
        source = archive / relative
        resolved = source.resolve()
        if archive not in resolved.parents:
            raise BadInput(source, "refusing to read outside the sweep's archive dir")
        if resolved.is_file():
            destination = io.unlinked_destination(target, resolved.relative_to(archive))
            io.write_with(destination, lambda tmp, source=resolved: shutil.copy2(source, tmp))
            copied.append(str(destination))
    return copied


def fetch(sweep_id: str, dest: str, *, root: str | None = None, broker: str | None = None, via: Any = None) -> dict:
    """Copy a sweep's rollup (and one root's summary files) from the archive to ``dest``.

    Only paths inside the sweep's archive dir are read, whatever the record or ``root`` say: locally
    when this machine mounts the archive, else over SFTP with ``via`` (an ``npuprof.deploy.ssh.Target``).
    """
    record = _connect(broker).load(sweep_id)
    paths = _fetch_paths(record, sweep_id, root)
    target = Path(dest)
    if via is not None:
        from npuprof.deploy.remote_fetch import fetch_over_sftp

        copied = fetch_over_sftp(via, record["archive"], paths, target)
        return {"sweep_id": sweep_id, "via": via.label, "copied": copied}
    archive = Path(record["archive"]).resolve()
    if not archive.is_dir():
        raise UsageError(f"the archive {archive} is not mounted on this machine: fetch over SFTP with --via ssh://host")
    target.mkdir(parents=True, exist_ok=True)
    return {"sweep_id": sweep_id, "copied": _fetch_local(archive, paths, target)}
