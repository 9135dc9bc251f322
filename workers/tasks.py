"""Celery tasks: the same pipeline units as the local runner, spread over workers.

Each root is a chord of ``analyze_rank`` tasks (one per rank, so one big root spreads over every
worker) whose callback ``reduce_root`` runs the cluster-level stages and renames the root's work dir
into the archive. ``merge_sweep`` starts with the sweep and supervises it: it looks at the archive
every few seconds, sends again the reduce of a root whose chord callback was lost (``recovery``),
and writes the rollup once every root is there. Tasks write artifacts straight into the archive and
return small dicts; the reduce and merge trust the archive, not their arguments — ``reduce_root``
waits for every rank's marker file, holds the root's lock, and a second copy of it finds nothing to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from celery import chord, group
from celery.utils.log import get_task_logger
from kombu.exceptions import OperationalError

from npuprof.pipeline import __version__, io
from npuprof.pipeline.errors import (
    EXIT_NO_SPACE,
    EXIT_USAGE,
    NoSpace,
    NpuprofError,
    StageFailed,
    failure_object,
    full_disk,
    naming_full_disk,
    no_space,
    traceback_of,
)
from npuprof.pipeline.execution import run_rank_chain
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import StageRange, analyze, finish_root, run_lock_holder, write_failure
from npuprof.pipeline.sources.discovery import discover
from npuprof.pipeline.stages import STAGE_NAMES
from npuprof.pipeline.sweep import service_mark
from npuprof.pipeline.sweep.local import is_reusable
from npuprof.pipeline.sweep.rollup import merge_sweep, root_rollup, root_status
from npuprof.pipeline.sweep.roots import find_roots, root_slug
from npuprof.workers import merge_watch, records, recovery, settings, storage
from npuprof.workers.app import app
from npuprof.workers.attempts import RankAttempts

MARKERS = recovery.MARKERS
logger = get_task_logger(__name__)
POLL_SECONDS = 1  # between two looks of the sweep's merge at the archive
TRANSIENT = (OSError, OperationalError)  # I/O, and a broker that did not take a message while it restarted


def root_key(root: str, options: dict) -> str:
    """Task ids derive from (root, options, npuprof version): the same work gets the same id."""
    text = json.dumps([str(Path(root).resolve()), options, __version__], sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _progress_reporter(task):
    def report(stage: str, done: int, total: int, message: str = "") -> None:
        percent = round(100.0 * done / total, 1) if total else 100.0
        task.update_state(
            state="PROGRESS",
            meta={"stage": stage, "done": done, "total": total, "percent": percent, "message": message},
        )

    return report


@app.task(
    bind=True,
    name="npuprof.analyze_rank",
    autoretry_for=TRANSIENT,
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=5,
)
def analyze_rank(self, work_dir: str, rank: dict, options: dict, stages: list[str]) -> dict:
    """Rank-local stages of one rank; leaves a marker file that says it finished (or why it failed).

    A rank whose worker process keeps dying under it (a poison rank) is given up after
    ``max_rank_retries`` deaths: its marker says why, and its root fails instead of the sweep stalling.
    A full archive fails the task at once (NoSpace, not retried); the supervisor then fails the root."""
    try:
        return _analyze_rank(self, work_dir, rank, options, stages)
    except OSError as exc:  # the attempts file or the marker
        if not no_space(exc):
            raise
        raise full_disk(Path(work_dir).parent) from None  # the archive: the work dir in it is only npuprof's


def _analyze_rank(task, work_dir: str, rank: dict, options: dict, stages: list[str]) -> dict:
    storage.require_served([work_dir, *storage.rank_paths(rank), *storage.options_paths(options)], "a rank task")
    recovery.check_work_dir(Path(work_dir))  # a message names no dir the plan did not make
    marker = recovery.marker_path(Path(work_dir), rank["rank_id"])
    attempts = RankAttempts(marker.with_name(f"rank_{rank['rank_id']}.attempts.json"), rank)
    given_up = attempts.given_up(settings.max_rank_retries())
    if given_up is not None:
        return _rank_marker(marker, rank, _failed(given_up))
    attempts.start(task.request.hostname or "a worker")
    report = _progress_reporter(task)

    def progress(stage: str, done: int, total: int, message: str = "") -> None:
        attempts.at_stage(stage)  # where a death was last seen
        report(stage, done, total, message)

    try:
        results = run_rank_chain(work_dir, rank, options, stages, progress=progress)
        payload = {"status": "ok", "results": results}
    except StageFailed as exc:
        if isinstance(exc.cause, NoSpace):  # no marker would fit either: the task fails, named
            raise full_disk(Path(work_dir).parent) from None
        payload = _failed(exc)
    except NpuprofError as exc:  # bad data fails this root, never the worker or the sweep
        payload = _failed(exc)
    finally:  # also when a transient error retries the task: only a dead process never gets here
        attempts.end()
    return _rank_marker(marker, rank, payload)


def _failed(exc: NpuprofError) -> dict:
    return {"status": "failed", "failure": failure_object(exc), "traceback": traceback_of(exc)}


def _rank_marker(marker: Path, rank: dict, payload: dict) -> dict:
    io.write_json(marker, {"rank_id": rank["rank_id"], **payload})
    return {"rank_id": rank["rank_id"], "status": payload["status"]}


def _write_root_failure(work: Path, failure: dict, traceback: str | None = None) -> bool:
    """Write a failed root's failure.json into ``work``; on a full disk, first drop the root's partial
    outputs to make room. False when not even that fits (the work dir is gone then: no half root)."""
    for _ in range(2):
        try:
            work.mkdir(exist_ok=True)
            io.write_failure(work, failure, traceback)
            return True
        except OSError as exc:
            if not no_space(exc):
                raise
            for part in work.iterdir():  # the plan's marker stays: it lets the failure be moved into place
                if part.name != MARKERS:
                    shutil.rmtree(part, ignore_errors=True) if part.is_dir() else part.unlink(missing_ok=True)
    return False


def _finalize(work: Path, final: Path, options: dict) -> str:
    """Move the finished work dir into place; a duplicate run keeps the bytes already there. Only a work
    dir the plan marked for ``final`` is moved, and only over an npuprof output (both callers have checked
    the two dirs lie in the served storage)."""
    recovery.check_work_dir(work, final)
    shutil.rmtree(work / MARKERS, ignore_errors=True)
    if final.exists() and is_reusable(final, AnalyzeOptions.from_dict(options)):
        shutil.rmtree(work, ignore_errors=True)
        return "duplicate"
    io.move_dir_into_place(work, final)
    return "moved"


@app.task(bind=True, name="npuprof.reduce_root", autoretry_for=TRANSIENT, retry_backoff=True, max_retries=5)
def reduce_root(
    self, work_dir: str, final_dir: str, inputs: dict, options: dict, stages: list[str], sweep_id: str | None = None
) -> dict:
    """Cluster-level stages of one root once every rank's marker is on disk; then the atomic rename.
    As it lands, a sweep whose supervisor stopped looking gets a new one (``merge_watch``); when the
    supervisor looked too recently to tell, ``watch_merge`` asks again once that look is stale."""
    result = _reduce_root(self, work_dir, final_dir, inputs, options, stages)
    if sweep_id is not None and not merge_watch.revive_if_stale(app, sweep_id):
        record = records.load(sweep_id) or {}
        if record.get("state") not in records.FINISHED:
            queue = record.get("queue") or settings.DEFAULT_QUEUE
            watch_merge.apply_async((sweep_id,), countdown=settings.merge_stale_seconds() + 1, queue=queue)
    return result


@app.task(name="npuprof.watch_merge", autoretry_for=TRANSIENT, retry_backoff=True, max_retries=5)
def watch_merge(sweep_id: str) -> dict:
    """A landed root's second look at its sweep's supervisor, a stale time after it landed: when the
    supervisor is lost just as the last roots land, no later reduce is left to notice, and a sweep that
    no client asks after would stay running."""
    return {"revived": merge_watch.revive_if_stale(app, sweep_id)}


def _reduce_root(task, work_dir: str, final_dir: str, inputs: dict, options: dict, stages: list[str]) -> dict:
    named = [work_dir, final_dir, *storage.inputs_paths(inputs), *storage.options_paths(options)]
    storage.require_served(named, "a reduce task")
    work, final = Path(work_dir), Path(final_dir)
    # before any lock file, write, removal or move: the dirs must be what a plan made (a crafted message
    # naming any two dirs is refused here), or the root already finished by another copy of this reduce
    if work.exists() or not recovery.replaceable_output(final):
        recovery.check_work_dir(work, final)
    with recovery.root_lock(work) as present:
        if not present:  # another copy of this reduce (a resent one, or the chord's) finished the root
            return {
                "status": root_status(final),
                "root": inputs["root"],
                "output_dir": final_dir,
                "note": "already finalized",
            }
        markers = {r["rank_id"]: recovery.marker_path(work, r["rank_id"]) for r in inputs["ranks"]}
        missing = [r for r, path in markers.items() if not path.exists()]
        if missing:  # a rank task was redelivered after a worker died: wait for it, not for the chord counter
            raise task.retry(countdown=3, max_retries=2400, exc=RuntimeError(f"waiting for ranks {missing}"))
        status, error = _reduce_work(work, inputs, options, stages, [io.read_json(p) for p in markers.values()])
        if status == "not_written":  # the archive is too full to hold even why
            return {"status": status, "root": inputs["root"], "output_dir": None, "error": error}
        how = _finalize(work, final, options)
    try:
        root_rollup(inputs["root"], final.name, final)  # cache the rollup row here, in parallel, not in the merge
    except OSError as exc:  # a full disk: the merge computes the row again (and says so if it cannot write)
        if not no_space(exc):
            raise
    return {
        "status": root_status(final) if how == "duplicate" else status,
        "root": inputs["root"],
        "output_dir": final_dir,
    }


def _reduce_work(work: Path, inputs: dict, options: dict, stages: list[str], payloads: list[dict]) -> tuple[str, str]:
    """The cluster-level stages in ``work`` (status ok), or the root's failure.json (failed; not_written
    when the disk cannot hold it), with the error."""
    failed = [p for p in payloads if p["status"] != "ok"]
    if failed:
        failure, traceback = failed[0]["failure"], failed[0].get("traceback")
    else:
        try:
            finish_root(str(work), inputs, options, stages, [p["results"] for p in payloads])
            return "ok", ""
        except OSError as exc:  # the top manifest
            if not no_space(exc):
                raise
            error: NpuprofError = StageFailed("manifest", full_disk(work.parent))
        except NpuprofError as exc:
            error = naming_full_disk(exc, work.parent)
        failure, traceback = failure_object(error), traceback_of(error)
    written = _write_root_failure(work, failure, traceback)
    return ("failed" if written else "not_written"), failure.get("error", "")


def _fail_root_at_plan(final: Path, exc: NpuprofError) -> None:
    work = final.with_name(f".{final.name}.plan-failure")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_failure(work, exc)
    io.move_dir_into_place(work, final)


@app.task(bind=True, name="npuprof.plan_sweep", autoretry_for=TRANSIENT, retry_backoff=True, max_retries=5)
def plan_sweep(self, sweep_id: str, search_roots: list[str], archive: str, options: dict) -> dict:
    """On a worker that mounts the storage: find the roots and their ranks, launch one chord per root
    and the merge that supervises them. A local sweep writing the archive refuses the sweep; so does a
    search root or archive outside the storage this worker serves (nothing is created then), and a
    plan message no submitted sweep waits for (a replay) runs nothing at all."""
    refusal = records.plan_refusal(records.load(sweep_id), self.request.id, search_roots, archive, options)
    if refusal is not None:
        logger.warning("refused a plan of sweep %s: %s", sweep_id, refusal)
        return {"sweep_id": sweep_id, "state": "refused", "error": f"refused the plan: {refusal}"}
    try:
        storage.require_served([*search_roots, archive, *storage.options_paths(options)], "the sweep")
    except storage.OutsideStorage as exc:
        records.update(sweep_id, state="failed", error=exc.one_line(), exit_code=exc.exit_code, finished_at=time.time())
        return {"sweep_id": sweep_id, "state": "failed", "error": exc.one_line()}
    archive_dir = Path(archive)
    archive_dir.mkdir(parents=True, exist_ok=True)
    service_mark.write_mark(archive_dir, sweep_id, settings.redacted(settings.broker_url()))
    holder = run_lock_holder(archive_dir)
    if holder is not None:  # a local sweep took the archive first (it looks for our mark under its lock)
        service_mark.clear_mark(archive_dir, sweep_id)
        error = (
            f"archive {archive_dir} is being written by a local npuprof sweep ({holder}): submit again when it "
            "has finished, or give another -o"
        )
        records.update(sweep_id, state="failed", error=error, exit_code=EXIT_USAGE, finished_at=time.time())
        return {"sweep_id": sweep_id, "state": "failed", "error": error}
    stages = list(STAGE_NAMES)
    planned = [
        _plan_root(root, search_roots, archive_dir, options, stages, sweep_id) for root in find_roots(search_roots)
    ]
    plan = [entry for entry, _ in planned]
    merge_id = f"npuprof-merge-{sweep_id}"
    # a resubmit's ids are the last run's: their results (a failure on a full disk, say) must not speak
    # for this run — dropped for every scheduled root in one round trip, before any task is sent
    scheduled = [entry for entry, root_chord in planned if root_chord is not None]
    records.forget_results(app, [merge_id, *(i for e in scheduled for i in (*e["rank_ids"], e["reduce_id"]))])
    records.update(sweep_id, roots=plan, merge_id=merge_id, state="running", stages=stages, planned_at=time.time())
    queue_name = self.request.delivery_info.get("routing_key") or settings.DEFAULT_QUEUE
    # the merge supervises from the start: it does not wait for a chord of chords whose bookkeeping a
    # Redis restart can break, it watches the archive (a resend of this task after a broker error
    # sends the same ids again: a rank analysed twice writes the same bytes, a reduce twice does nothing)
    root_chords = [root_chord for _, root_chord in planned if root_chord is not None]
    first_look = POLL_SECONDS if root_chords else 0  # nothing to analyze (a finished sweep resubmitted): at once
    generation = records.next_merge_generation(sweep_id)  # any merge of an earlier run of this sweep stops
    merge_sweep_task.apply_async((sweep_id, generation), task_id=merge_id, queue=queue_name, countdown=first_look)
    for root_chord in root_chords:
        root_chord.apply_async()
    return {"sweep_id": sweep_id, "roots": len(plan), "scheduled": len(root_chords)}


def _plan_root(root: Path, search_roots: list[str], archive_dir: Path, options: dict, stages: list[str], sweep_id: str):
    """One root's record entry, and its chord (None when the root is reused or failed at discovery)."""
    slug = root_slug(root, search_roots)
    key = root_key(str(root), options)
    final = archive_dir / slug
    queue = settings.queue_for(root)
    entry = {"root": str(root), "slug": slug, "key": key, "queue": queue, "reduce_id": f"npuprof-root-{key}"}
    entry["rank_ids"] = []
    if is_reusable(final, AnalyzeOptions.from_dict(options)):
        return {**entry, "reused": True}, None
    try:
        inputs = discover(root)
    except NpuprofError as exc:
        _fail_root_at_plan(final, exc)
        return {**entry, "failed_at_plan": exc.one_line()}, None
    work = archive_dir / f".{slug}.work-{key}"
    if final.exists():  # a failed (or older) output: the archive says "missing" until the new one lands,
        shutil.rmtree(final)  # so the merge waits for it instead of taking the old one for the answer
    recovery.mark_work_dir(work, final, key)  # the rank and reduce tasks act on marked work dirs only
    entry.update({"work_dir": str(work), "final_dir": str(final), "inputs": inputs.to_dict()})
    rank_tasks = []
    for rank in inputs.ranks:
        task_id = f"npuprof-rank-{key}-{rank.rank_id}"
        entry["rank_ids"].append(task_id)
        rank_tasks.append(analyze_rank.si(str(work), vars(rank), options, stages).set(task_id=task_id, queue=queue))
    body = reduce_root.si(str(work), str(final), inputs.to_dict(), options, stages, sweep_id).set(
        task_id=entry["reduce_id"], queue=queue
    )
    return entry, chord(group(rank_tasks), body)


@app.task(bind=True, name="npuprof.merge_sweep", autoretry_for=TRANSIENT, retry_backoff=True, max_retries=None)
def merge_sweep_task(self, sweep_id: str, generation: int = 0) -> dict:
    """Supervise the sweep until every root's output is in the archive (or could not be written there);
    then sweep_summary.json and sweep_class_rollup.csv.

    Runs again every second till then: each look lists the archive once (a root's dir appears by an
    atomic rename when it is finished), so the sweep ends a second after its last root; every
    ``supervise_seconds`` a look also asks after each missing root (``_supervise_root``). A copy of an
    older ``generation`` stops: ``merge_watch`` sent a new one, taking this one for lost."""
    if generation < records.merge_generation(sweep_id):
        return {"status": "superseded"}
    records.looked(sweep_id)
    record = records.load(sweep_id)
    if record is None or record.get("state") in records.FINISHED:  # a duplicate, or a cancelled sweep
        return {"status": record.get("state") if record else "forgotten"}
    storage.require_sweep_record(record)
    archive = Path(record["archive"])
    not_written = {lost["root"]: lost for lost in record.get("roots_not_written", [])}
    if self.request.retries % settings.supervise_seconds() == 0:
        for entry in _missing(record, archive, not_written):
            _supervise_root(entry, record, not_written)
        if len(not_written) > len(record.get("roots_not_written", [])):
            records.update(sweep_id, roots_not_written=list(not_written.values()))
    missing = _missing(record, archive, not_written)
    if missing:
        raise self.retry(countdown=POLL_SECONDS, exc=RuntimeError(f"waiting for {len(missing)} roots"))
    return _merge(record, archive, list(not_written.values()))


def _missing(record: dict, archive: Path, not_written: dict) -> list[dict]:
    """The roots of the sweep with no dir in the archive yet (and not given up as not written): one
    listing, not a look into every root, as a finished root's dir appears by an atomic rename."""
    present = set(os.listdir(archive)) if archive.is_dir() else set()
    return [e for e in record["roots"] if e["root"] not in not_written and e["slug"] not in present]


def _merge(record: dict, archive: Path, not_written: list[dict]) -> dict:
    """The rollup of every root; the sweep's record says done, or failed when the archive cannot hold it."""
    sweep_id = record["sweep_id"]
    meta = {
        "sweep_id": sweep_id,
        "search_roots": record["search_roots"],
        "options": record["options"],
        "npuprof_version": __version__,
        "reused_roots": sum(1 for e in record["roots"] if e.get("reused")),
        "mode": "service",
        "wall_seconds": round(time.time() - record["submitted_at"], 3),
        "roots_not_written": not_written,
        "series_key": record.get("series_key"),
    }
    try:
        summary = merge_sweep(archive, [(e["root"], e["slug"]) for e in record["roots"]], meta)
    except OSError as exc:
        if not no_space(exc):
            raise
        error = f"no space left on device writing the rollup into {archive}"
        service_mark.clear_mark(archive, sweep_id)
        records.update(sweep_id, state="failed", error=error, exit_code=EXIT_NO_SPACE, finished_at=time.time())
        return {"status": "failed", "error": error}
    service_mark.clear_mark(archive, sweep_id)
    records.update(
        sweep_id,
        state="done",
        summary={k: summary[k] for k in ("status_counts", "failed_roots", "root_count", "roots_not_written")},
        finished_at=time.time(),
    )
    return {"status": "done", "status_counts": summary["status_counts"], "rollup": summary["rollup"]}


def _supervise_root(entry: dict, record: dict, not_written: dict) -> None:
    """Resend the reduce of a root whose chord callback was lost, or fail a root a task of which failed
    in the service (``recovery.next_action``); a root still in progress is left alone. A root the
    archive turns out too full to hold is added to ``not_written``."""
    if "work_dir" not in entry:
        return
    storage.require_served([entry["work_dir"], entry["final_dir"]], "the supervision of a root")
    work = Path(entry["work_dir"])
    reduce = app.AsyncResult(entry["reduce_id"])
    reduce_state, reduce_result = reduce.state, reduce.result
    if reduce_state == "SUCCESS" and isinstance(reduce_result, dict) and reduce_result.get("status") == "not_written":
        not_written[entry["root"]] = {"root": entry["root"], "error": reduce_result.get("error")}
        return
    action, failure = recovery.next_action(
        work,
        [r["rank_id"] for r in entry["inputs"]["ranks"]],
        reduce_state,
        repr(reduce_result) if reduce_state == "FAILURE" else None,
        lambda: [(t, r.result) for t in entry["rank_ids"] if (r := app.AsyncResult(t)).state == "FAILURE"],
        recover_after=settings.recover_after(),
        now=time.time(),
    )
    if action == "resend_reduce" and records.claim(entry["reduce_id"], settings.recover_after()):
        args = (entry["work_dir"], entry["final_dir"], entry["inputs"], record["options"], record["stages"])
        reduce_root.apply_async(args, task_id=entry["reduce_id"], queue=entry["queue"])
    elif action == "fail":
        with recovery.root_lock(work) as present:
            if not present:  # a reduce finished the root meanwhile
                return
            if _write_root_failure(work, failure):
                _finalize(work, Path(entry["final_dir"]), record["options"])
            else:
                not_written[entry["root"]] = {"root": entry["root"], "error": failure["error"]}


@app.task(bind=True, name="npuprof.run_stages", autoretry_for=TRANSIENT, retry_backoff=True, max_retries=5)
def run_stages(self, out_dir: str, from_stage: str | None, to_stage: str | None, options: dict) -> dict:
    """Re-run a range of stages on an existing output dir (e.g. after a new npuprof adds a stage)."""
    storage.require_served([out_dir, *storage.options_paths(options)], "a run_stages task")
    storage.require_output_dir(out_dir, "a run_stages task")
    try:
        return analyze(
            None,
            out_dir,
            options=AnalyzeOptions.from_dict(options),
            stage_range=StageRange(from_stage, to_stage),
            jobs=1,
            progress=_progress_reporter(self),
        )
    except NpuprofError as exc:
        return failure_object(exc)
