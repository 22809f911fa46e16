#!/usr/bin/env bash
# docs/tutorials/undo-to-a-point.md: an agent undoes its own last calls, then an operator
# undoes another session's down to a step while its agent waits, and the agent goes on.
set -euo pipefail

python examples/undo_to.py

hold=$(mktemp -d)
python examples/undo_to.py --hold "$hold" >"$hold/agent.log" 2>&1 &
agent=$!
until [ -s "$hold/session" ]; do sleep 0.1; done
session=$(cat "$hold/session")

# --8<-- [start:operator]
# what undoing down to step 1 would do, in order (nothing changes yet) ...
undolog sessions undo-to "$session" 1 --plan --reason "check first"
# ... then do it: the session walks, and new calls are refused until it is back
undolog sessions undo-to "$session" 1 --by alice --reason "hotel and car were for the wrong week"
undolog worker --app examples.undo_to:ul --all-owners --once  # one login for all, here
# --8<-- [end:operator]

touch "$hold/go"
wait "$agent"
cat "$hold/agent.log"
rm -r "$hold"

# --8<-- [start:history]
undolog sessions show "$session"
psql -X -c "SELECT from_state, to_state, detail FROM undolog.undolog_session_history
            WHERE session_id = '$session' ORDER BY history_id"
# --8<-- [end:history]

# --8<-- [start:allow]
# let agents undo their own sessions in this database (off by default)
psql -X -c "ALTER DATABASE \"$PGDATABASE\" SET undolog.agent_rollback_to = on"
# --8<-- [end:allow]
