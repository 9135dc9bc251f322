"""Sweep records in Redis (root → task ids, options, archive dir), so any client can ask about a sweep."""

from __future__ import annotations

import json
import time

import redis

from npuprof.workers import settings

_PREFIX = f"{settings.KEY_PREFIX}sweep:"
ACTIVE = ("planning", "running")
FINISHED = ("done", "cancelled", "failed")  # failed: refused at planning, or the rollup did not fit


def _client(url: str | None = None) -> redis.Redis:
    return redis.Redis.from_url(
        url or settings.broker_url(),
        socket_connect_timeout=5,
        socket_timeout=10,
        retry_on_timeout=True,
        health_check_interval=30,
    )


def save(record: dict, url: str | None = None) -> None:
    """Store the record; it expires ``record_days`` after its last change (Redis memory stays bounded)."""
    _client(url).set(_PREFIX + record["sweep_id"], json.dumps(record), ex=settings.record_days() * 86400)


def delete(sweep_id: str, url: str | None = None, claims: list[str] = ()) -> None:
    """Drop the sweep's record and every key kept beside it: its supervisor's last look, its merge
    generation, the claim of its merge's last revival (a slow cluster revives one) and the resend
    ``claims`` of its roots' reduces."""
    keys = [_PREFIX + sweep_id] + [f"{settings.KEY_PREFIX}{kind}:{sweep_id}" for kind in ("looked", "merge-generation")]
    claims = [f"revive-merge:{sweep_id}", *claims]
    _client(url).delete(*keys, *(f"{settings.KEY_PREFIX}claim:{name}" for name in claims))


def load(sweep_id: str, url: str | None = None) -> dict | None:
    raw = _client(url).get(_PREFIX + sweep_id)
    return json.loads(raw) if raw else None


def active_on(archive: str, url: str | None = None) -> list[dict]:
    """The sweeps still planning or running that write into ``archive``."""
    client = _client(url)
    found = []
    for key in client.scan_iter(match=_PREFIX + "*", count=500):
        raw = client.get(key)
        record = json.loads(raw) if raw else {}
        if record.get("archive") == archive and record.get("state") in ACTIVE:
            found.append(record)
    return found


def update(sweep_id: str, url: str | None = None, **fields) -> dict | None:
    record = load(sweep_id, url)
    if record is None:
        return None
    record.update(fields)
    save(record, url)
    return record


def plan_refusal(record: dict | None, plan_id: str, search_roots: list[str], archive: str, options: dict) -> str | None:
    """Why a plan message must not run, or None: it runs only for the sweep a client submitted — its
    record planning (or running: a plan retried after a broker error sends the same ids again), with this
    message's id as its plan id and the message's own roots, archive and options. A signed message copied
    and sent again (after ``forget``, after the sweep ended, or after a resubmit gave it a new plan id) is
    refused here: signing proves who wrote a message, not that it is the one the record waits for."""
    if record is None:
        return "no sweep record waits for it (forgotten, expired, or never submitted)"
    if record.get("state") not in ("planning", "running") or record.get("plan_id") != plan_id:
        return f"its sweep is {record.get('state')} and waits for no plan {plan_id}"
    submitted = (record.get("search_roots"), record.get("archive"), record.get("options"))
    if submitted != (list(search_roots), archive, options):
        return "it names other roots, archive or options than its sweep's record"
    return None


def claim(name: str, seconds: int, url: str | None = None) -> bool:
    """True for the first caller in ``seconds`` that claims ``name`` (e.g. resending one root's reduce)."""
    return bool(_client(url).set(f"{settings.KEY_PREFIX}claim:{name}", "1", nx=True, ex=max(int(seconds), 1)))


def spend_message(nonce: str, seconds: int, url: str | None = None) -> None:
    """Remember for ``seconds`` that the message carrying ``nonce`` ran (``envelope``: a copy is refused)."""
    _client(url).set(f"{settings.KEY_PREFIX}spent:{nonce}", "1", ex=max(int(seconds), 1))


def message_spent(nonce: str, url: str | None = None) -> bool:
    """Whether the message carrying ``nonce`` already ran."""
    return bool(_client(url).exists(f"{settings.KEY_PREFIX}spent:{nonce}"))


def looked(sweep_id: str, url: str | None = None) -> None:
    """The sweep's supervisor looked at its archive now (``merge_watch`` tells a lost one by this)."""
    _client(url).set(f"{settings.KEY_PREFIX}looked:{sweep_id}", time.time(), ex=settings.record_days() * 86400)


def last_look(sweep_id: str, url: str | None = None) -> float | None:
    raw = _client(url).get(f"{settings.KEY_PREFIX}looked:{sweep_id}")
    return float(raw) if raw else None


def merge_generation(sweep_id: str, url: str | None = None) -> int:
    """The generation of the sweep's supervisor that may run: an older copy (superseded) stops."""
    raw = _client(url).get(f"{settings.KEY_PREFIX}merge-generation:{sweep_id}")
    return int(raw) if raw else 0


def next_merge_generation(sweep_id: str, url: str | None = None) -> int:
    """A new generation of the sweep's supervisor (a plan or a revival), superseding every older copy."""
    key = f"{settings.KEY_PREFIX}merge-generation:{sweep_id}"
    client = _client(url)
    generation = int(client.incr(key))
    client.expire(key, settings.record_days() * 86400)
    return generation


def drop_queued(sweep_id: str, url: str | None = None) -> int:
    """Remove the messages that still name a forgotten sweep: a landed root's ``watch_merge`` waits out its
    countdown on a worker, and when that worker stops it goes back to its queue, where it would stay until
    some worker took it only to look at a sweep that is gone. Queues are found by their kombu bindings;
    messages a live worker holds (``unacked``) are dropped too (its ack of a missing one is a no-op)."""
    client = _client(url)
    binding = f"{settings.KEY_PREFIX}_kombu.binding."
    dropped = 0
    for key in client.scan_iter(match=binding + "*", count=500):
        queue = settings.KEY_PREFIX + key.decode("utf-8", "replace")[len(binding) :]
        for raw in client.lrange(queue, 0, -1):
            if _names_sweep(raw, sweep_id):
                dropped += client.lrem(queue, 0, raw)
    unacked, index = f"{settings.KEY_PREFIX}unacked", f"{settings.KEY_PREFIX}unacked_index"
    for tag, raw in client.hgetall(unacked).items():
        try:
            message = json.loads(raw)[0]
        except (ValueError, TypeError, IndexError, KeyError):
            continue
        if _names_sweep(json.dumps(message), sweep_id):
            dropped += client.hdel(unacked, tag)
            client.zrem(index, tag)
    return dropped


def _names_sweep(raw: bytes | str, sweep_id: str) -> bool:
    """Whether a queued message's task arguments name ``sweep_id`` (the headers Celery writes in clear
    beside the signed body)."""
    try:
        headers = json.loads(raw).get("headers") or {}
    except (ValueError, AttributeError):
        return False
    return sweep_id in f"{headers.get('argsrepr', '')} {headers.get('kwargsrepr', '')}"


def forget_results(app, task_ids: list[str]) -> None:
    """Drop the stored results of ``task_ids`` in one round trip (a 1,024-rank root's plan forgets 1,025
    of them; ``AsyncResult.forget`` would make a round trip each). Keys as the result backend names them."""
    ids = [t for t in task_ids if t]
    if not ids:
        return
    backend = app.backend
    with backend.client.pipeline(transaction=False) as pipe:
        for task_id in ids:
            pipe.delete(backend.get_key_for_task(task_id))
        pipe.execute()
