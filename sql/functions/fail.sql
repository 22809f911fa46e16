-- undolog.fail: the body reported an error; executing -> pending. It never took effect,
-- so the undo walk skips it; making the same call again executes it again.
-- p_async => true: as for commit, this transaction commits asynchronously, and only when
-- fail is its first write (a transaction that wrote an intent earlier keeps the client's
-- setting); a lost fail leaves the effect executing, and the walk then compensates a
-- call that never acted (compensations are idempotent). The two-argument form stays.
-- Answers 'pending', or 'late' when the undo walk had already taken the effect (see
-- finish_execution). fail_effect is the same call with the session id first.

CREATE OR REPLACE FUNCTION undolog.fail(
    p_effect_id uuid, p_error text, p_async boolean DEFAULT FALSE
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    IF p_async AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN undolog.finish_execution(p_effect_id, 'pending', NULL,
                                    coalesce(left(p_error, 8192), 'failed'));
END
$$;

REVOKE ALL ON FUNCTION undolog.fail(uuid, text, boolean) FROM public;
