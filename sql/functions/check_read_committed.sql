-- undolog.check_read_committed: refuses (UL008) a function that decides by what it reads
-- after waiting for a session's lock, in a transaction that is not READ COMMITTED. Under
-- REPEATABLE READ or SERIALIZABLE its snapshot predates what committed while it waited:
-- complete_session would not see a call journaled meanwhile, still executing, and would
-- complete the session over it; a new irreversible call would count its login's pending
-- requests without those asked meanwhile. Nothing those transactions wrote makes them
-- fail to serialise (a journaled call does not write the session row), so they are
-- refused instead. The binding runs them at READ COMMITTED, PostgreSQL's default.
CREATE OR REPLACE FUNCTION undolog.check_read_committed(p_function text)
RETURNS void
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_isolation text := pg_catalog.current_setting('transaction_isolation');
BEGIN
    IF v_isolation <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('%s runs at READ COMMITTED, not %s', p_function,
                                        pg_catalog.upper(v_isolation)),
            DETAIL = 'It decides by what it reads after waiting for the session: this '
                     'transaction''s snapshot would miss what committed meanwhile.',
            HINT = 'Call it outside an explicit transaction, or in one begun with BEGIN '
                   'ISOLATION LEVEL READ COMMITTED.';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_read_committed(text) FROM public;
