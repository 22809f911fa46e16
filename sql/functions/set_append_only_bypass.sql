-- undolog.set_append_only_bypass: let the next DELETE on one append-only table through
-- undolog.forbid_change, for this transaction only; NULL closes it again.
-- Partition maintenance must delete the rows tied to a dropped month (undo stack,
-- undo history, approval requests) and move rows out of the default partition, while every
-- other DELETE stays refused. The setting names the table by oid (exact whatever the
-- search_path or quoting); forbid_change also requires the current user to own the
-- table, so a role that could set the (unprivileged, placeholder) setting gains nothing.
-- No SET clause on purpose: a function-level SET would undo this SET LOCAL on return.
CREATE OR REPLACE FUNCTION undolog.set_append_only_bypass(p_table regclass)
RETURNS void
LANGUAGE sql
VOLATILE
AS $$
    SELECT FROM pg_catalog.set_config(
        'undolog.append_only_bypass', coalesce(p_table::oid::text, ''), true
    )
$$;

REVOKE ALL ON FUNCTION undolog.set_append_only_bypass(regclass) FROM public;
