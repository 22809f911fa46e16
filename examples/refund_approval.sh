#!/usr/bin/env bash
# docs/tutorials/approvals.md in one terminal: the agent waits in the background while
# you, the approver, decide. (In two terminals: run the agent in one, the rest in the other.)
set -euo pipefail
# --8<-- [start:shown]

# the agent's output goes to a scratch file outside the clone
log=$(mktemp -t undolog-agent.XXXXXX)
python examples/refund_approval.py > "$log" &
agent=$!

# The agent prints the id of its request; wait for that line.
until grep "approvals approve" "$log" > /dev/null; do sleep 0.5; done
approval=$(grep -o "approvals approve [0-9a-f-]*" "$log" | cut -d" " -f3)

# What waits for a human: the agent's request (and any other that waits).
undolog approvals list

# Approve it: the agent wakes up and runs the refund, once.
undolog approvals approve "$approval" --by alice --reason "order checked"

wait "$agent"
cat "$log"
rm -f "$log"
# --8<-- [end:shown]
