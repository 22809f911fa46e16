#!/usr/bin/env bash
# docs/how-to/roles.md: each login does its own part.
set -euo pipefail
# --8<-- [start:shown]

psql -v ON_ERROR_STOP=1 -f examples/roles.sql

# libpq takes the last value of a repeated key: the same database, another login
agent="$UNDOLOG_DSN user=billing_agent"
approver="$UNDOLOG_DSN user=alice"
operator="$UNDOLOG_DSN user=undolog_cron"

# The agent works as billing_agent. It may not run undo walks (that is the operator's
# role), so its failed session waits for the worker.
UNDOLOG_DSN=$agent python examples/first_agent.py
undolog --dsn "$agent" sessions list --state failed

# The operator's worker undoes it: it serves billing_agent, the login whose compensations
# examples.first_agent holds (--owner, repeatable).
undolog --dsn "$operator" worker --app examples.first_agent:ul --owner billing_agent --once

# The approver reads every session, whoever ran it.
undolog --dsn "$approver" sessions list
# --8<-- [end:shown]
