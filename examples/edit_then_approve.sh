#!/usr/bin/env bash
# docs/tutorials/edit-then-approve.md in one terminal: the agent waits in the background
# while you, the approver, change the amount and approve it.
set -euo pipefail
# --8<-- [start:shown]

log=$(mktemp -t undolog-agent.XXXXXX)
python examples/edit_then_approve.py > "$log" &
agent=$!
until grep "approvals approve" "$log" > /dev/null; do sleep 0.5; done
approval=$(grep -o "approvals approve [0-9a-f-]*" "$log" | cut -d" " -f3)

# What the agent asked for: the tool and its arguments.
undolog approvals list

# Approve it with another amount, saying why. The arguments may come from a file too:
# --args-file edited.json (or - for standard input).
undolog approvals approve "$approval" --by alice \
    --args '{"account": "supplier-17", "cents": 25000}' \
    --reason "the invoice says 250.00, not 2500.00"

wait "$agent"
cat "$log"
rm -f "$log"

# The journal keeps both: the effect's args as asked, the request's approved_args.
psql -X -c "SELECT e.args AS requested, a.approved_args, a.decided_by, a.reason
            FROM undolog.undolog_approval_requests AS a
            JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id)
            WHERE a.approval_id = '$approval'"
# --8<-- [end:shown]
