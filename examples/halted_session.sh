#!/usr/bin/env bash
# docs/operations/recovery.md: a halted session, looked at and moved on by an operator.
set -euo pipefail

MAIL_DOWN=1 python examples/halted_session.py

# --8<-- [start:inspect]
# which sessions wait for a person, and why
undolog sessions list --state halted
halted=$(undolog sessions list --state halted --json |
    python -c 'import json, sys; print(json.load(sys.stdin)[0]["session_id"])')
undolog sessions show "$halted"
# --8<-- [end:inspect]

# --8<-- [start:retry]
# the mail server is back: give the failed compensation one more attempt ...
psql -X -v ON_ERROR_STOP=1 -v sid="$halted" <<'SQL'
SELECT undolog.retry_compensation(u.undo_id, 'alice', 'mail server is back')
FROM undolog.undolog_undo_stack AS u
WHERE u.session_id = :'sid' AND u.state = 'compensation_failed';
SQL
# ... which the worker runs
undolog worker --app examples.halted_session:ul --once
# --8<-- [end:retry]

# --8<-- [start:abandon]
# another halted session, resolved by hand: it stays halted, marked resolved
MAIL_DOWN=1 python examples/halted_session.py
other=$(undolog sessions list --state halted --json |
    python -c 'import json, sys; print(json.load(sys.stdin)[0]["session_id"])')
psql -X -v ON_ERROR_STOP=1 -v sid="$other" <<'SQL'
SELECT undolog.abandon_session(:'sid', 'alice', 'recalled the mail by hand');
SQL
# --8<-- [end:abandon]
