#!/usr/bin/env bash
# docs/tutorials/approvals.md in one terminal: the agent waits in the background while
# you, the approver, decide. (In two terminals: run the agent in one, the rest in the other.)
set -euo pipefail

python examples/approval_round_trip.py > agent.log &
agent=$!

# what waits for a human (ask again until the agent's request is there)
until undolog approvals list --json | grep approval_id >/dev/null; do sleep 0.5; done
undolog approvals list

# approve it: the agent wakes up and runs the refund, once
approval=$(undolog approvals list --json |
    python -c 'import json, sys; print(json.load(sys.stdin)[0]["approval_id"])')
undolog approvals approve "$approval" --by alice --reason "order checked"

wait "$agent"
cat agent.log
