-- undolog.session_deadlocked: UL030 for a wait for a session (lock_session,
-- lock_session_shared) that a deadlock ended: the transaction that holds the session waits
-- in turn for a lock this one holds, most often the session's chain head, which a call of
-- the session reported (committed, failed) in this transaction, or a move of it, holds
-- until this transaction ends. An agent meets it with itself (its other connection's
-- fail_session, complete_session or IRREVERSIBLE call waits for that head while holding
-- the session) or with a person's move made meanwhile: PostgreSQL ends one of the two
-- after deadlock_timeout, and when it is this one, the way out is to end this transaction
-- (the other then goes on), not to wait for the other. Not session_held's message, which
-- tells a move that held the session to try again and end the other transaction.
CREATE OR REPLACE FUNCTION undolog.session_deadlocked(p_session_id uuid)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'UL030',
        MESSAGE = pg_catalog.format('session %s is held by a transaction that waits for this one',
                                    p_session_id),
        DETAIL = 'A deadlock ended the wait for it: the transaction that holds it waits in turn '
                 'for a lock this transaction holds (most often the session''s history, which a '
                 'call of it reported in this transaction holds until it ends). Nothing was '
                 'changed.',
        HINT = 'Roll this transaction back (this error aborted it: a COMMIT now rolls it back '
               'too), then make its calls again: the other transaction goes on once this one '
               'ends.';
END
$$;

REVOKE ALL ON FUNCTION undolog.session_deadlocked(uuid) FROM public;
