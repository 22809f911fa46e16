#!/usr/bin/env bash
# docs/tutorials/approvals.md in one terminal: the agent waits in the background while
# you, the approver, decide. (In two terminals: run the agent in one, the rest in the other.)
set -euo pipefail

python examples/approval_round_trip.py > agent.log &
agent=$!

# What waits for a human. Other requests may wait too (the quickstart left one): ours is
# the newest refund, last in the list (oldest first). Ask until the agent's is there.
newest_refund() {
    undolog approvals list --json | python -c '
import json, sys
refunds = [r for r in json.load(sys.stdin) if r["tool_name"] == "refund"]
print(refunds[-1]["approval_id"] if refunds else "")'
}
approval=$(newest_refund)
until [ -n "$approval" ]; do sleep 0.5; approval=$(newest_refund); done
undolog approvals list

# approve it: the agent wakes up and runs the refund, once
undolog approvals approve "$approval" --by alice --reason "order checked"

wait "$agent"
cat agent.log
