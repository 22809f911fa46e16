#!/usr/bin/env bash
# Installs the reference MCP servers the proxy's tests run for real (versions pinned in
# tools/mcp-reference-servers.json) into a folder, with npm, within a bound:
#
#   install-mcp-servers.sh DIR
#
# npm retries a registry it cannot reach for minutes a package and prints nothing by
# default: a first `make test` behind a TLS-intercepting proxy without Node's CA setting
# once sat silent for 19 minutes. Here each request shows as it goes (--loglevel=http),
# the whole install stops after UNDOLOG_NPM_TIMEOUT seconds (600 by default), and a
# failure ends with what to do next.
set -euo pipefail

dir=${1:?usage: $0 DIR}
bound=${UNDOLOG_NPM_TIMEOUT:-600}
pins="$(dirname "$0")/mcp-reference-servers.json"

if ! command -v npm >/dev/null; then
    echo "npm is missing: install Node.js (node, npm) to run the reference MCP servers" >&2
    exit 1
fi
mapfile -t specs < <(python3 -c '
import json, sys
for name, version in json.load(open(sys.argv[1])).items():
    print(f"{name}@{version}")
' "$pins")

mkdir -p "$dir"
log="$dir/npm-install.log"
echo "installing the reference MCP servers into $dir (npm; at most $bound s)"
rc=0
timeout "$bound" npm install --prefix "$dir" --no-audit --no-fund --loglevel=http \
    --fetch-retries=1 "${specs[@]}" 2>&1 | tee "$log" || rc=$?
if ((rc == 0)); then
    exit 0
fi
if ((rc == 124)); then
    echo "npm install did not finish in $bound s (UNDOLOG_NPM_TIMEOUT sets the bound)." >&2
else
    echo "npm install failed (exit $rc); its output is in $log." >&2
fi
if grep -qE 'CERT|certificate' "$log"; then
    echo "The registry's TLS certificate was refused: behind a proxy that signs with its own" \
        "CA, point Node at the system's bundle and run make again:" \
        "export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt" >&2
else
    echo "Check that the npm registry (npm config get registry) answers from here" \
        "(npm ping), then run make again." >&2
fi
exit 1
