"""What a task message says of itself inside its signed body: its task name, its id, when it was sent and
a nonce.

Celery's ``auth`` serializer signs a message's body (args and kwargs), not its headers, where the task
name and id travel: whoever can write to the broker could take a signed message and send it again as
another task or under another id, any time later. So every message a client or worker publishes
carries ``ENVELOPE`` among its kwargs (``before_task_publish``: after the task id is chosen, before the
body is serialized and signed), and a worker's tasks (``EnvelopedTask``) check it against the headers
they were delivered with, and its age, before they run. With signing on, a message without one is
refused too (without signing anyone may write any message: there the check only catches a mismatch).

The nonce is spent when the message's task has run (``records.spend_message``, kept as long as a message
may live): a copy of a message that ran, sent again by whoever reads the broker, is refused. It is not
spent when a task starts: a message delivered again after its worker died mid-run (``task_acks_late``)
is how the service loses no work, and that message must run. A copy sent while the first still runs is
not refused here: every task but the plan is idempotent under its own id, and the plan runs only for the
record that waits for it (``records.plan_refusal``).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import time

import redis
from celery import Task, signals

from npuprof.pipeline.errors import UsageError
from npuprof.workers import records

ENVELOPE = "_npuprof_sent"
# a sender's clock may run ahead of a worker's by this much (NTP keeps a cluster far closer)
CLOCK_SKEW_S = 300.0
NONCE = re.compile(r"[0-9a-f]{32}")
logger = logging.getLogger(__name__)


class RefusedMessage(UsageError):
    """A message whose signed body does not say what its headers say, or is too old: it runs nothing."""


def max_age_s() -> float:
    """Seconds after which a message is refused as a replay (``NPUPROF_MESSAGE_MAX_AGE_DAYS``, default 7:
    longer than any queue backlog or retry backoff waits)."""
    return float(os.environ.get("NPUPROF_MESSAGE_MAX_AGE_DAYS", "7")) * 86400


@signals.before_task_publish.connect
def _seal(sender: str | None = None, body: object = None, headers: dict | None = None, **_: object) -> None:
    """Put the task's name, id and the time into the body's kwargs (protocol 2: (args, kwargs, embed))."""
    if isinstance(body, (tuple, list)) and len(body) >= 2 and isinstance(body[1], dict) and headers:
        sent = {"task": headers.get("task"), "id": headers.get("id"), "sent_at": time.time()}
        body[1][ENVELOPE] = {**sent, "nonce": secrets.token_hex(16)}


def envelope_problem(sent: object, task: str, task_id: str | None, required: bool, now: float) -> str | None:
    """Why a message's envelope refuses it, or None: it must name this task and this id, carry a nonce,
    and be younger than ``max_age_s`` (and not from the future); without one, it passes unless
    ``required``. Whether the nonce was spent is the task's question (``EnvelopedTask``)."""
    if sent is None:
        return "it carries no signed task name and id" if required else None
    if not isinstance(sent, dict):
        return "its envelope is not an object"
    if sent.get("task") != task:
        return f"its signed body was sent as task {sent.get('task')!r}, its headers say {task!r}"
    if sent.get("id") != task_id:
        return f"its signed body was sent as id {sent.get('id')!r}, its headers say {task_id!r}"
    if not isinstance(sent.get("nonce"), str) or not NONCE.fullmatch(sent["nonce"]):
        return "its envelope carries no nonce"
    sent_at = sent.get("sent_at")
    if not isinstance(sent_at, (int, float)) or isinstance(sent_at, bool):
        return "its envelope carries no send time"
    if now - sent_at > max_age_s():
        return f"it was sent {(now - sent_at) / 86400:.1f} days ago (a replay: at most {max_age_s() / 86400:g})"
    if sent_at - now > CLOCK_SKEW_S:
        return f"it was sent {sent_at - now:.0f} s in the future"
    return None


class EnvelopedTask(Task):
    """The service's task class: a delivered message runs only when its envelope matches its headers."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        sent = kwargs.pop(ENVELOPE, None)
        if isinstance(self.request.kwargs, dict):  # a retry re-sends request.kwargs: sealed anew, not twice
            self.request.kwargs.pop(ENVELOPE, None)
        if not self.request.called_directly:  # a message from the broker, not a call in this process
            signed = self.app.conf.task_serializer == "auth"
            problem = envelope_problem(sent, self.name, self.request.id, signed, time.time())
            if problem is not None:
                raise RefusedMessage(f"refused a message for {self.name}[{self.request.id}]: {problem}")
            if isinstance(sent, dict):
                return self._run_once(sent["nonce"], args, kwargs)
        return super().__call__(*args, **kwargs)

    def _run_once(self, nonce: str, args: tuple, kwargs: dict) -> object:
        """Run the message unless its nonce was spent; spend it once the task has run (a retry is a new
        message with a nonce of its own; a worker that dies mid-run spends nothing)."""
        url = self.app.conf.broker_url
        if self._spent(nonce, url):
            raise RefusedMessage(
                f"refused a message for {self.name}[{self.request.id}]: it already ran (a copy sent again)"
            )
        try:
            result = super().__call__(*args, **kwargs)
        except Exception:  # it ran and failed, or asked for a retry (a new message): either way, it ran
            self._spend(nonce, url)
            raise
        self._spend(nonce, url)
        return result

    def _spent(self, nonce: str, url: str) -> bool:
        try:
            return records.message_spent(nonce, url)
        except redis.RedisError as exc:  # a copy needs the broker to be sent: one that cannot be checked runs
            logger.warning("could not check message %s[%s] against those that ran: %s", self.name, self.request.id, exc)
            return False

    def _spend(self, nonce: str, url: str) -> None:
        try:
            records.spend_message(nonce, int(max_age_s() + CLOCK_SKEW_S) + 1, url)
        except redis.RedisError as exc:  # the run stands; only a later copy of it could run again
            logger.warning("could not spend message %s[%s]: %s", self.name, self.request.id, exc)
