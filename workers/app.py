"""The Celery app: Redis broker and backend, reliability settings (docs/architecture.md, README: the service).

``make_app(broker)`` builds an app for one broker URL: workers use the module's ``app`` (the URL of
``NPUPROF_BROKER_URL``), and a client that talks to another broker builds its own and sends tasks
by name, so nothing global is mutated (but message signing, when configured, registers Celery's
``auth`` serializer process-wide: ``workers.signing``).
"""

from __future__ import annotations

import logging
import textwrap

from celery import Celery, signals

from npuprof.pipeline import input_files
from npuprof.pipeline.terminal_text import loggable, printable
from npuprof.workers import envelope, settings, signing


def make_app(broker: str | None = None) -> Celery:
    """A Celery app for ``broker`` (default: ``NPUPROF_BROKER_URL``) with npuprof's settings."""
    url = broker or settings.broker_url()
    # every message carries its task name and id inside its (signed) body, checked before a task runs
    celery_app = Celery(
        "npuprof", broker=url, backend=url, include=["npuprof.workers.tasks"], task_cls=envelope.EnvelopedTask
    )
    celery_app.conf.update(
        # a task is acknowledged only when it finished: a worker that dies mid-task loses nothing
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # every key npuprof's service writes starts with KEY_PREFIX: a shared Redis stays readable
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout(),
            # scan for expired messages every restore_sweep_seconds: one scan per timer tick (throttle 1)
            "unacked_restore_interval": settings.restore_sweep_seconds(),
            "unacked_restore_throttle": 1,
            "global_keyprefix": settings.KEY_PREFIX,
        },
        result_backend_transport_options={
            "visibility_timeout": settings.visibility_timeout(),
            "retry_policy": {"timeout": 5.0},
            "global_keyprefix": settings.KEY_PREFIX,
        },
        task_soft_time_limit=settings.soft_time_limit(),
        task_time_limit=settings.hard_time_limit(),
        task_default_queue=settings.DEFAULT_QUEUE,
        task_track_started=True,
        task_send_sent_event=True,
        worker_send_task_events=True,
        result_extended=True,
        result_expires=settings.record_days() * 24 * 3600,  # results live as long as their sweep record
        # a result that cannot be stored while Redis restarts is retried, not turned into a task failure
        result_backend_always_retry=True,
        result_backend_max_retries=120,
        result_backend_base_sleep_between_retries_ms=500,
        result_backend_max_sleep_between_retries_ms=5000,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
    )
    signing.configure(celery_app)  # signed task and control messages when NPUPROF_SIGNING_* say so
    return celery_app


class _EscapingFormatter(logging.Formatter):
    """The worker's log formatter, with control characters from data (a kernel name, a path in a task
    message) shown as escapes: a log read in a terminal cannot be rewritten by what it records."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        # the message and the traceback are escaped, not the formatted line: Celery's colours stay colours.
        # A record is one line at column 0: the message's newlines are escapes too, and a traceback's lines
        # are indented, so a newline in a path a task names cannot start a line that reads as a record
        escaped = logging.makeLogRecord(record.__dict__)
        escaped.msg, escaped.args = printable(record.getMessage()), None
        if record.exc_info:
            trace = loggable(record.exc_text or self.inner.formatException(record.exc_info))
            escaped.exc_text = textwrap.indent(trace, "| ", lambda line: True)
        return self.inner.format(escaped)


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _escape_log_output(logger: logging.Logger, **_: object) -> None:
    for handler in logger.handlers:
        if not isinstance(handler.formatter, _EscapingFormatter):
            handler.setFormatter(_EscapingFormatter(handler.formatter or logging.Formatter()))


@signals.worker_init.connect
@signals.worker_process_init.connect
def confine_inputs(**_: object) -> None:
    """A worker reads capture files only inside the storage it serves, checked at each open (a file
    swapped for a link out after a task's path check is refused then: pipeline/input_files.py)."""
    input_files.confine_to(settings.served_storage())


app = make_app()
