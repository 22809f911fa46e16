#!/usr/bin/env bash
# docs/tutorials/notifications.md in one terminal: channels, an agent that asks, one pass
# of the delivery loop, and the decision. HOOK_URL, SMTP_HOST, SMTP_PORT and
# DASHBOARD_URL say where your webhook receiver, mail server and dashboard are.
set -euo pipefail
# --8<-- [start:channels]
# The webhook's HMAC key: from your secret store (here a new random one). The command
# reads it from the environment, never from its command line, which `ps` shows.
HOOK_SECRET=${HOOK_SECRET:-$(python -c "import secrets; print(secrets.token_hex(32))")}
export HOOK_SECRET
undolog notifications add-webhook ops-hook "$HOOK_URL" --secret-env HOOK_SECRET \
    --dashboard-url "$DASHBOARD_URL" --by alice
undolog notifications add-email oncall --to oncall@example.com \
    --smtp-host "$SMTP_HOST" --smtp-port "$SMTP_PORT" --from undolog@example.com \
    --dashboard-url "$DASHBOARD_URL" --by alice
undolog notifications list
# --8<-- [end:channels]
# --8<-- [start:link-secret]
# The links' key: from your secret store (here a new random one), at least 16 characters.
# The delivery worker signs each message's link with it; give the dashboard the same one
# (UNDOLOG_LINK_SECRET in its environment too) and it checks them.
UNDOLOG_LINK_SECRET=${UNDOLOG_LINK_SECRET:-$(python -c "import secrets; print(secrets.token_hex(32))")}
export UNDOLOG_LINK_SECRET
# --8<-- [end:link-secret]
# --8<-- [start:deliver]
# The agent of the approvals tutorial asks for a refund and waits.
log=$(mktemp -t undolog-agent.XXXXXX)
python examples/refund_approval.py > "$log" &
agent=$!
until grep "approvals approve" "$log" > /dev/null; do sleep 0.5; done
approval=$(grep -o "approvals approve [0-9a-f-]*" "$log" | cut -d" " -f3)

# One pass of the delivery loop (`undolog worker` runs one after each of its passes).
undolog notify --once
undolog notifications deliveries --approval "$approval"

# The person who got the mail opens the link, looks, and decides.
undolog approvals approve "$approval" --by alice --reason "order checked"
wait "$agent"
rm -f "$log"
# --8<-- [end:deliver]
