#!/usr/bin/env bash
# docs/operations/partitions.md: archive old months before they go.
set -euo pipefail
# --8<-- [start:shown]

# detach (not drop) every month that ended by the cut-off; the tables stay, outside the
# journal, and their sessions' undo and approval rows are pruned as a drop would
undolog partitions drop --older-than 2025-01-01T00:00:00Z --detach

# dump the detached tables, then drop them
pg_dump --table='undolog.undolog_effect_*_2024_*' > undolog-2024.sql
psql -X -v ON_ERROR_STOP=1 <<'SQL'
SELECT format('DROP TABLE %s', c.oid::regclass)
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = 'undolog' AND c.relname ~ '^undolog_effect_(log|history)_2024_\d\d$'
  AND NOT c.relispartition
\gexec
SQL
# --8<-- [end:shown]
