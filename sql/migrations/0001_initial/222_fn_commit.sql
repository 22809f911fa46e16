-- undolog.commit: the body succeeded; executing -> committed, result cached for replays.
-- A NULL result is stored as JSON null.
CREATE OR REPLACE FUNCTION undolog.commit(p_effect_id uuid, p_result jsonb)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    PERFORM undolog.check_payload('result', p_result);
    PERFORM undolog.finish_execution(p_effect_id, 'committed',
                                     coalesce(p_result, 'null'::jsonb), NULL);
END
$$;

REVOKE ALL ON FUNCTION undolog.commit(uuid, jsonb) FROM public;
GRANT EXECUTE ON FUNCTION undolog.commit(uuid, jsonb) TO undolog_agent;
