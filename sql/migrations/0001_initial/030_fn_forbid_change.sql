-- undolog.forbid_change: trigger function for append-only tables. Bound BEFORE UPDATE OR
-- DELETE (row) and BEFORE TRUNCATE (statement, since TRUNCATE skips row triggers).
-- Dropping or detaching a whole partition is DDL, not a row change, and still works.
CREATE OR REPLACE FUNCTION undolog.forbid_change()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'UL011',
        MESSAGE = pg_catalog.format('%s.%s is append-only: %s is not allowed',
                                    TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP),
        HINT = 'History is immutable; a correction is a new event.';
END
$$;

REVOKE ALL ON FUNCTION undolog.forbid_change() FROM public;
