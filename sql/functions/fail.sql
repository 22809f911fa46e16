-- undolog.fail: the body reported an error; executing -> pending. It never took effect,
-- so the undo walk skips it; making the same call again executes it again.
-- p_async => true: as for commit, this transaction commits asynchronously, and only when
-- fail is its first write (a transaction that wrote an intent earlier keeps the client's
-- setting); a lost fail leaves the effect executing, and the walk then compensates a
-- call that never acted (compensations are idempotent). The two-argument form stays.
-- Answers 'pending', or 'late' when the undo walk had already taken the effect (see
-- finish_execution). Two forms, as commit: fail(session_id, effect_id, error, async),
-- routable by its first argument (UL003 when the effect is not of that session), and
-- the original fail(effect_id, error, async).

CREATE OR REPLACE FUNCTION undolog.fail(
    p_session_id uuid, p_effect_id uuid, p_error text, p_async boolean DEFAULT FALSE
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
    IF NOT EXISTS (SELECT FROM undolog.undolog_signature_registry AS r
                   WHERE r.effect_id = p_effect_id AND r.session_id = p_session_id) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL003',
            MESSAGE = pg_catalog.format('unknown effect %s in session %s', p_effect_id,
                                        p_session_id);
    END IF;
    RETURN undolog.finish_execution(p_effect_id, 'pending', NULL,
                                    coalesce(left(p_error, 8192), 'failed'));
END
$$;

REVOKE ALL ON FUNCTION undolog.fail(uuid, uuid, text, boolean) FROM public;

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
