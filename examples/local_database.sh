#!/usr/bin/env bash
# docs/quickstart.md: from a fresh clone to your first agent on a database that stays.
set -euo pipefail
# --8<-- [start:shown]

make deps                  # what is missing: PostgreSQL 15, the test tools, .venv
. .venv/bin/activate       # now `python` and `undolog` are the project's
eval "$(make -s db)"       # a local PostgreSQL in .pgdata; sets UNDOLOG_DSN, PGHOST, ...
undolog migrate            # installs the engine (schema undolog)
python examples/quickstart.py
make db-stop               # the data stays in .pgdata: `make db` starts it again
# --8<-- [end:shown]
