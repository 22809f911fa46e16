#!/usr/bin/env bash
# docs/tutorials/first-agent.md: run the agent, then read what the journal holds.
set -euo pipefail

# --8<-- [start:run]
python examples/first_agent.py
# --8<-- [end:run]

# --8<-- [start:inspect]
# every session, newest first
undolog sessions list

# the failed one: which calls ran, and how each was undone
failed=$(undolog sessions list --state compensated --json |
    python -c 'import json, sys; print(json.load(sys.stdin)[0]["session_id"])')
undolog sessions show "$failed"
# --8<-- [end:inspect]
