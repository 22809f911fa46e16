-- undolog.forbid_change: trigger function for append-only tables, bound BEFORE UPDATE OR
-- DELETE and BEFORE TRUNCATE. It refuses every change, with one exception: retention
-- must delete the undo and approval rows of a dropped month, and
-- ensure_partitions must move rows out of the default partition, while no one else can
-- delete. A DELETE passes only when both hold:
--   1. the transaction-local setting undolog.append_only_bypass names this very table
--      (its oid): set by undolog.set_append_only_bypass around one statement of a
--      maintenance function, and gone at the end of the transaction (or subtransaction)
--      in every case;
--   2. the current user owns the table (inside the SECURITY DEFINER maintenance
--      functions, the engine's owner). Any role can set a placeholder setting, so the
--      setting alone would be no guard; the owner can disable triggers anyway, so the
--      bypass grants nobody anything new. It works for a non-superuser owner, unlike
--      session_replication_role.
-- UPDATE and TRUNCATE are always refused. Dropping or detaching a whole partition is DDL,
-- not a row change, and needs no bypass.
CREATE OR REPLACE FUNCTION undolog.forbid_change()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- The cheap test first: only a bypassed DELETE pays for the catalog lookup.
    IF TG_OP = 'DELETE'
       AND pg_catalog.current_setting('undolog.append_only_bypass', true) = TG_RELID::text
       AND EXISTS (SELECT FROM pg_catalog.pg_class AS c
                   WHERE c.oid = TG_RELID
                     AND pg_catalog.pg_get_userbyid(c.relowner) = current_user) THEN
        IF TG_LEVEL = 'ROW' THEN
            RETURN OLD;
        END IF;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL011',
            MESSAGE = pg_catalog.format('%s.%s is append-only: UPDATE is not allowed',
                                        TG_TABLE_SCHEMA, TG_TABLE_NAME),
            HINT = 'History is immutable; a correction is a new event.';
    END IF;
    -- DELETE or TRUNCATE: also on tables whose rows change state (sessions, effects, undo
    -- entries), which are not append-only but keep every row.
    RAISE EXCEPTION USING
        ERRCODE = 'UL011',
        MESSAGE = pg_catalog.format('%s.%s keeps every row: %s is not allowed',
                                    TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP),
        HINT = 'Rows leave the journal only with their month, by retention: '
               'undolog partitions drop --older-than, or maintain --retention-months.';
END
$$;

REVOKE ALL ON FUNCTION undolog.forbid_change() FROM public;
