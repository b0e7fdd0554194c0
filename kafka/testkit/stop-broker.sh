#!/usr/bin/env bash
# Stop the broker started by start-broker.sh DIR: SIGTERM (clean shutdown),
# then SIGKILL after TIMEOUT seconds. Only that one pid is signalled.
# Usage: kafka/testkit/stop-broker.sh DIR [TIMEOUT_SECONDS]   (default 30)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[[ $# -ge 1 ]] || die "usage: $0 DIR [TIMEOUT_SECONDS]"
DIR="$1"; TIMEOUT="${2:-30}"
[[ -f "${DIR}/broker.pid" ]] || { log "no ${DIR}/broker.pid: nothing to stop"; exit 0; }
pid="$(cat "${DIR}/broker.pid")"
if ! kill -0 "${pid}" 2>/dev/null || ! grep -q kafka.Kafka "/proc/${pid}/cmdline" 2>/dev/null; then
  log "broker pid ${pid} is not running"; rm -f "${DIR}/broker.pid"; exit 0
fi
kill -TERM "${pid}"
for _ in $(seq 1 $(( TIMEOUT * 5 ))); do
  kill -0 "${pid}" 2>/dev/null || { rm -f "${DIR}/broker.pid"; log "stopped broker pid ${pid}"; exit 0; }
  sleep 0.2
done
log "broker pid ${pid} ignored SIGTERM for ${TIMEOUT}s: SIGKILL"
kill -KILL "${pid}" 2>/dev/null || true
rm -f "${DIR}/broker.pid"
