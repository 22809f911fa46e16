#!/usr/bin/env bash
# Installs, from Debian's packages, what `make test` and `make demo` need beyond Python:
# PostgreSQL 15 server binaries, pgTAP, plpgsql_check, pg_prove, and Chromium with its
# driver (the dashboard's browser tests). Only what is missing;
# as root directly, otherwise through sudo when it is there.
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
missing=()

if ! command -v pg_config >/dev/null || [[ ! -x "$(pg_config --bindir)/initdb" ]]; then
    missing+=("postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR")
fi
sharedir=$(pg_config --sharedir 2>/dev/null || echo "/usr/share/postgresql/$PG_MAJOR")
[[ -f $sharedir/extension/pgtap.control ]] || missing+=("postgresql-$PG_MAJOR-pgtap")
[[ -f $sharedir/extension/plpgsql_check.control ]] || missing+=("postgresql-$PG_MAJOR-plpgsql-check")
command -v pg_prove >/dev/null || missing+=("libtap-parser-sourcehandler-pgtap-perl")
# The dashboard's browser tests drive Debian's Chromium through its matching driver.
[[ -x /usr/bin/chromium ]] || missing+=("chromium")
[[ -x /usr/bin/chromedriver ]] || missing+=("chromium-driver")

((${#missing[@]})) || exit 0

echo "installing system packages: ${missing[*]}" >&2
if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null; then
    sudo=(sudo)
else
    echo "error: not root and no sudo; install these packages: ${missing[*]}" >&2
    exit 1
fi
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
