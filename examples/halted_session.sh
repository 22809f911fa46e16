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
undolog sessions retry "$halted" --by alice --reason "mail server is back"
# ... which the worker runs (one login for everything here: --all-owners)
undolog worker --app examples.halted_session:ul --all-owners --once
# --8<-- [end:retry]

# --8<-- [start:abandon]
# another halted session, resolved by hand: it stays halted, marked resolved
MAIL_DOWN=1 python examples/halted_session.py
other=$(undolog sessions list --state halted --json |
    python -c 'import json, sys; print(json.load(sys.stdin)[0]["session_id"])')
undolog sessions abandon "$other" --by alice --reason "recalled the mail by hand"
# --8<-- [end:abandon]
