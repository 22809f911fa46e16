#!/usr/bin/env bash
# docs/how-to/retention.md: keep two years of journal, then let maintenance drop the rest.
set -euo pipefail
# --8<-- [start:shown]

# the database's own setting: examples/settings.sql (retention), or just
psql -v ON_ERROR_STOP=1 <<'SQL'
ALTER DATABASE :"DBNAME" SET undolog.retention_months = 24;
SQL

# the daily job: months ahead created, months past retention dropped
undolog partitions maintain

# or, once, with a retention of its own
undolog partitions maintain --retention-months 36
# --8<-- [end:shown]
