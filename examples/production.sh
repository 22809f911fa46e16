#!/usr/bin/env bash
# docs/tutorials/production.md: what an operator runs. The worker as a service is in
# examples/undolog-worker.service, the daily jobs in examples/crontab.
set -euo pipefail
# --8<-- [start:shown]

# Is the engine installed and current (exit 1: a migrate is due)? Is everything healthy:
# the connection, the schema, no walk waiting longer than --max-lag seconds?
undolog status
undolog health

# One pass of the worker: expired leases -> failed, then every walk that is due, of the
# sessions of the agent logins whose compensations the app holds (--owner, repeatable).
undolog worker --app examples.first_agent:ul --owner billing_agent --once

# The month partitions of the journal: three months ahead exist, old ones go.
undolog partitions ensure --months-ahead 3
undolog partitions maintain

# Sessions that wait for a person (a compensation failed for good, or an irreversible
# call stopped the walk).
undolog sessions list --state halted
# --8<-- [end:shown]
