#!/usr/bin/env bash
# docs/operations/monitoring.md: the engine's metrics, as Prometheus reads them. Run with
# UNDOLOG_DSN naming an approver or operator login (an agent login is refused).
set -euo pipefail
listen=${UNDOLOG_METRICS_LISTEN:-127.0.0.1:9464}

# --8<-- [start:once]
# one scrape, printed: what Prometheus would read now
undolog metrics --once | grep -E '^undolog_(up|halted_sessions|worker_lag_seconds) '
# --8<-- [end:once]

# --8<-- [start:serve]
# serve GET /metrics until stopped (run it under your supervisor, like the worker)
undolog metrics --listen "$listen" &
server=$!
until curl -sf "http://$listen/metrics" >/dev/null; do sleep 0.2; done
curl -s "http://$listen/metrics" | grep -E '^undolog_sessions\{state="(active|halted)"\}'
kill "$server"
# --8<-- [end:serve]
