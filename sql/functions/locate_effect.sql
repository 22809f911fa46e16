-- undolog.locate_effect: an effect's key (session_id, effect_id, executed_at) from its
-- id alone, in its undo entry (every journaled call has exactly one); UL003 when there
-- is no such effect.
CREATE OR REPLACE FUNCTION undolog.locate_effect(p_effect_id uuid)
RETURNS undolog.undolog_undo_stack
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_entry undolog.undolog_undo_stack;
BEGIN
    SELECT u.* INTO v_entry
    FROM undolog.undolog_undo_stack AS u
    WHERE u.effect_id = p_effect_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL003',
            MESSAGE = pg_catalog.format('unknown effect %s', coalesce(p_effect_id::text, 'NULL')),
            HINT = 'Pass the effect_id that intercept answered for the call.';
    END IF;
    RETURN v_entry;
END
$$;

REVOKE ALL ON FUNCTION undolog.locate_effect(uuid) FROM public;
