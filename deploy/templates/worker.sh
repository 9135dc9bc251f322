#!/bin/sh
# One npuprof Celery worker, with the settings of worker.env beside this script (written by
# `npuprof deploy`; the broker URL is in broker_url, 0600, read by the worker: never in its
# environment). Run by supervise.sh or a systemd unit.
set -eu
DIR=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
set -a
. "$DIR/worker.env"
set +a
exec "$DIR/venv/bin/python" -m celery -A npuprof.workers.app worker --loglevel INFO \
  -Q "$NPUPROF_QUEUES" -n "$NPUPROF_WORKER_NAME" ${NPUPROF_CONCURRENCY:+-c} ${NPUPROF_CONCURRENCY:+"$NPUPROF_CONCURRENCY"}
