-- 0013_hot_events_in_row: a new call's two hot events, its creation (intercept) and its
-- commit, are recorded in the effect's own row instead of as two effect-history rows
-- (Journal v2, issue 23: a history row costs a partitioned insert and its chain trigger
-- on every journaled call). Every other transition, and every replay, is still a history
-- row. The events are links of the session's hash chain, stored in the row beside what
-- they record, as an approval request's decision is (decision_*):
--   the creation: executed_at and intercepted_by (there already), linked in chain_*;
--   the commit: committed_at and committed_by (new), linked in commit_*, its record the
--   whole call (what the creation's says too).
-- A COMPENSABLE call is linked at its first change of state, not when it is inserted:
-- when that is its commit, one link (commit_*) records both events, and intercept's
-- insert fires no trigger at all. An IRREVERSIBLE call is linked when it is inserted (a
-- person may read it for hours before deciding).
-- events_in_row tells the two kinds of rows apart: false for the rows written before
-- this migration (they keep their history rows for both events; no rewrite: a constant
-- default is stored once), true for every row written since.

ALTER TABLE undolog.undolog_effect_log
ADD COLUMN events_in_row boolean NOT NULL DEFAULT FALSE;

ALTER TABLE undolog.undolog_effect_log
ALTER COLUMN events_in_row SET DEFAULT TRUE;

ALTER TABLE undolog.undolog_effect_log
ADD COLUMN committed_at timestamptz,
ADD COLUMN committed_by text,
ADD COLUMN chain_seq bigint,
ADD COLUMN chain_prev bytea,
ADD COLUMN chain_hash bytea,
ADD COLUMN commit_seq bigint,
ADD COLUMN commit_prev bytea,
ADD COLUMN commit_hash bytea;

-- undolog:after-repeatables
-- A month of the effect log created ahead and not attached yet (pending_partitions) is a
-- plain table with the columns its parent had then: it gets the new ones too, or its
-- ATTACH would fail.
DO $pending$
DECLARE
    v_name text;
BEGIN
    FOR v_name IN
        SELECT p.name FROM undolog.pending_partitions() AS p (name)
        WHERE p.name LIKE 'undolog\_effect\_log\_%'
    LOOP
        EXECUTE pg_catalog.format(
            'ALTER TABLE undolog.%I ADD COLUMN IF NOT EXISTS committed_at timestamptz, '
            'ADD COLUMN IF NOT EXISTS committed_by text, '
            'ADD COLUMN IF NOT EXISTS chain_seq bigint, '
            'ADD COLUMN IF NOT EXISTS chain_prev bytea, '
            'ADD COLUMN IF NOT EXISTS chain_hash bytea, '
            'ADD COLUMN IF NOT EXISTS commit_seq bigint, '
            'ADD COLUMN IF NOT EXISTS commit_prev bytea, '
            'ADD COLUMN IF NOT EXISTS commit_hash bytea, '
            'ADD COLUMN IF NOT EXISTS events_in_row boolean NOT NULL DEFAULT true', v_name);
    END LOOP;
END
$pending$;
