-- undolog.fail_effect: undolog.fail with the effect's session first,
-- fail_effect(session_id, effect_id, error, async), routable by its first argument as
-- commit_effect is; UL003 when the effect is not of that session. Otherwise it is fail
-- (see fail.sql): executing -> pending, 'pending' or 'late'.

CREATE OR REPLACE FUNCTION undolog.fail_effect(
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
    PERFORM undolog.check_effect_session(p_session_id, p_effect_id);
    RETURN undolog.finish_execution(p_effect_id, 'pending', NULL,
                                    coalesce(left(p_error, 8192), 'failed'));
END
$$;

REVOKE ALL ON FUNCTION undolog.fail_effect(uuid, uuid, text, boolean) FROM public;
