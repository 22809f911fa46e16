#!/usr/bin/env bash
# docs/operations/audit.md: verify the history's hash chains, export a session's journal
# and check it offline, keep an anchor outside the database.
set -euo pipefail

python examples/first_agent.py

# --8<-- [start:verify]
# every session's chain, recomputed: exit 0 when every row matches
undolog verify
# one session, or only the rows from some instant on
session=$(undolog sessions list --json |
    python -c 'import json, sys; print(json.load(sys.stdin)[0]["session_id"])')
undolog verify --session "$session"
undolog verify --since 2026-01-01Z
# --8<-- [end:verify]

# --8<-- [start:export]
# the session's journal as JSON lines, with its chain; checked again with no database
undolog export "$session" --output "session-$session.jsonl"
undolog verify --file "session-$session.jsonl"
# --8<-- [end:export]

# --8<-- [start:anchor]
# write an anchor now (maintenance writes one on every run) and keep it elsewhere
undolog anchor export --write > anchor.json
# later: the database still holds that anchor, unchanged, and the chains reach it
undolog verify --anchor anchor.json
# --8<-- [end:anchor]

# --8<-- [start:sql]
# the same check from SQL alone (psql, pg_cron): raises UL027 naming the first bad row
psql -X -c "SELECT undolog.assert_chain()"
# --8<-- [end:sql]
