#!/usr/bin/env bash
# docs/tutorials/crash-recovery.md: a crash, a restart that replays, and a dead agent
# whose work the worker undoes.
set -euo pipefail

# --8<-- [start:restart]
# 1. The agent books a hotel and a flight, then dies.
session=$(python -c 'import uuid; print(uuid.uuid4())')
python examples/crash_recovery.py "$session" --crash || echo "agent exited with $?"
undolog sessions list --state active

# 2. Restarted with the same session id: the hotel and the flight come back from the
#    journal (their bodies do not run again); only the car is booked.
python examples/crash_recovery.py "$session"
# --8<-- [end:restart]

# --8<-- [start:worker]
# 3. Another agent dies and is never restarted.
lost=$(python -c 'import uuid; print(uuid.uuid4())')
python examples/crash_recovery.py "$lost" --crash || echo "agent exited with $?"

# Its lease (3 seconds here) runs out; the worker then fails the session and runs its
# compensations, last first. One login runs the agents and the worker here, so the worker
# serves every login's sessions (--all-owners); give each agent a login of its own and name
# the ones the worker serves with --owner LOGIN (docs/operations/worker.md).
sleep 4
undolog worker --app examples.crash_recovery:ul --all-owners --once
undolog sessions show "$lost"
# --8<-- [end:worker]
