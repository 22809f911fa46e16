#!/usr/bin/env bash
# Runs the pgTAP suites against the PostgreSQL named by the PG* variables (make pgtap
# starts a throwaway one): a fresh database, the engine installed by `undolog migrate`,
# the pgtap and plpgsql_check extensions, then pg_prove over the files given
# (default: pgtap/*.sql).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
db=undolog_pgtap_$$
createdb "$db"
trap 'dropdb --if-exists "$db" >/dev/null 2>&1 || true' EXIT
PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}" "$here/.venv/bin/undolog" migrate --dsn "dbname=$db" >/dev/null
# the install recorded every migration and repeatable source (exit 1 otherwise)
PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}" "$here/.venv/bin/undolog" status --dsn "dbname=$db" >/dev/null
psql -q -v ON_ERROR_STOP=1 -d "$db" \
    -c "CREATE EXTENSION IF NOT EXISTS pgtap" -c "CREATE EXTENSION IF NOT EXISTS plpgsql_check"
if (($#)); then files=("$@"); else files=("$here"/pgtap/*.sql); fi
pg_prove --failures -d "$db" "${files[@]}"
