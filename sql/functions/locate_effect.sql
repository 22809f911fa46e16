-- undolog.locate_effect: an effect's key (session_id, effect_id, executed_at) from its
-- id alone, through the signature registry; UL003 when there is no such effect.
CREATE OR REPLACE FUNCTION undolog.locate_effect(p_effect_id uuid)
RETURNS undolog.undolog_signature_registry
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_key undolog.undolog_signature_registry;
BEGIN
    SELECT r.* INTO v_key
    FROM undolog.undolog_signature_registry AS r
    WHERE r.effect_id = p_effect_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL003',
            MESSAGE = pg_catalog.format('unknown effect %s', coalesce(p_effect_id::text, 'NULL'));
    END IF;
    RETURN v_key;
END
$$;

REVOKE ALL ON FUNCTION undolog.locate_effect(uuid) FROM public;
