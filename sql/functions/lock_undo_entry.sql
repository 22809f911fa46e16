-- undolog.lock_undo_entry: an undo entry by its id alone, locked, with its session locked
-- first (lock_session: the row, then its advisory lock). Every function of the walk locks
-- in the same order (session, then entry, then effect), so two of them never deadlock;
-- holding the session also makes the session transitions they take (compensating,
-- compensated, halted) race-free. Through lock_session the wait for a session another
-- transaction holds is bounded (UL030): a walker reporting on an entry must not wait for
-- ever behind a transaction its agent left open.
-- UL012 when there is no such entry.
CREATE OR REPLACE FUNCTION undolog.lock_undo_entry(p_undo_id uuid)
RETURNS undolog.undolog_undo_stack
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session_id uuid;
    v_entry undolog.undolog_undo_stack;
BEGIN
    SELECT u.session_id INTO v_session_id
    FROM undolog.undolog_undo_stack AS u
    WHERE u.undo_id = p_undo_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL012',
            MESSAGE = pg_catalog.format('unknown undo entry %s',
                                        coalesce(p_undo_id::text, 'NULL')),
            HINT = 'Check the id: undolog sessions show SESSION lists a session''s undo entries.';
    END IF;
    PERFORM FROM undolog.lock_session(v_session_id);
    SELECT u.* INTO STRICT v_entry
    FROM undolog.undolog_undo_stack AS u
    WHERE u.undo_id = p_undo_id AND u.session_id = v_session_id
    FOR UPDATE;
    RETURN v_entry;
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_undo_entry(uuid) FROM public;
