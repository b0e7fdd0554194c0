#!/usr/bin/env bash
# Wait until the broker started by start-broker.sh DIR is ready: its log says
# "Kafka Server started" and its client port accepts connections.
# Usage: kafka/testkit/wait-broker.sh DIR [TIMEOUT_SECONDS]   (default 90)
# Exits non-zero (with the log's tail) if the broker died or timed out.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[[ $# -ge 1 ]] || die "usage: $0 DIR [TIMEOUT_SECONDS]"
DIR="$1"; TIMEOUT="${2:-90}"
deadline=$(( $(date +%s) + TIMEOUT ))
while :; do
  if [[ -f "${DIR}/broker.env" && -f "${DIR}/broker.pid" ]]; then
    # shellcheck disable=SC1091
    source "${DIR}/broker.env"
    pid="$(cat "${DIR}/broker.pid")"
    if ! kill -0 "${pid}" 2>/dev/null; then
      tail -n 30 "${DIR}/logs/server.log" >&2 2>/dev/null || true
      die "broker (pid ${pid}) is not running; see ${DIR}/logs/server.log"
    fi
    if grep -q "Kafka Server started" "${DIR}/logs/server.log" 2>/dev/null && port_in_use "${PORT}"; then
      echo "${BOOTSTRAP}"
      exit 0
    fi
  fi
  if (( $(date +%s) >= deadline )); then
    tail -n 30 "${DIR}/logs/server.log" >&2 2>/dev/null || true
    die "broker in ${DIR} not ready after ${TIMEOUT}s"
  fi
  sleep 0.2
done
