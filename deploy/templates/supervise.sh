#!/bin/sh
# Keeps worker.sh running where systemd user units are not available (written by `npuprof deploy`).
# Its own pid and the worker's are in run/; SIGTERM stops the worker (Celery's warm shutdown) and it.
set -u
DIR=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
exec >>"$DIR/log/supervisor.log" 2>&1 </dev/null
echo $$ >"$DIR/run/supervisor.pid"
child=''
stop() {
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null
    wait "$child"
  fi
  rm -f "$DIR/run/worker.pid" "$DIR/run/supervisor.pid"
  exit 0
}
trap stop TERM INT HUP
while :; do
  "$DIR/worker.sh" >>"$DIR/log/worker.log" 2>&1 &
  child=$!
  echo "$child" >"$DIR/run/worker.pid"
  wait "$child"
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) worker exited ($?); restarting in 2 s"
  sleep 2
done
