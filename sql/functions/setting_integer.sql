-- undolog.setting_integer: an integer from a custom GUC (e.g. undolog.default_max_attempts)
-- within [p_min, p_max], or p_default when the GUC is unset or empty; UL008 otherwise.
CREATE OR REPLACE FUNCTION undolog.setting_integer(
    p_name text, p_default integer, p_min integer, p_max integer
)
RETURNS integer
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_text text := nullif(btrim(pg_catalog.current_setting(p_name, true)), '');
BEGIN
    IF v_text IS NULL THEN
        RETURN p_default;
    END IF;
    -- At most 9 digits, so the cast cannot overflow.
    IF v_text !~ '^[0-9]{1,9}$' OR v_text::integer NOT BETWEEN p_min AND p_max THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('setting %s must be an integer from %s to %s, not %s',
                                        p_name, p_min, p_max, pg_catalog.quote_literal(v_text));
    END IF;
    RETURN v_text::integer;
END
$$;

REVOKE ALL ON FUNCTION undolog.setting_integer(text, integer, integer, integer) FROM public;
