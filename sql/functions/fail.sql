-- undolog.fail: the body reported an error; executing -> pending. It never took effect,
-- so the undo walk skips it; making the same call again executes it again.
CREATE OR REPLACE FUNCTION undolog.fail(p_effect_id uuid, p_error text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    PERFORM undolog.finish_execution(p_effect_id, 'pending', NULL,
                                     coalesce(left(p_error, 8192), 'failed'));
END
$$;

REVOKE ALL ON FUNCTION undolog.fail(uuid, text) FROM public;
