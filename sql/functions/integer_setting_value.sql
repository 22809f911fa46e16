-- undolog.integer_setting_value: setting p_name's text p_value read as an integer within
-- [p_min, p_max], or p_default when it is unset (NULL) or empty; UL008 otherwise, naming
-- the setting, before the caller writes anything. The one reading of an integer setting,
-- wherever its text comes from: the session's (setting_integer) or the database's
-- (max_pending_approvals).
CREATE OR REPLACE FUNCTION undolog.integer_setting_value(
    p_name text, p_value text, p_default integer, p_min integer, p_max integer
)
RETURNS integer
LANGUAGE plpgsql
IMMUTABLE
AS $$
DECLARE
    v_text text := nullif(btrim(p_value), '');
BEGIN
    IF v_text IS NULL THEN
        RETURN p_default;
    END IF;
    -- At most 9 digits, so the cast cannot overflow.
    IF v_text !~ '^[0-9]{1,9}$' OR v_text::integer NOT BETWEEN p_min AND p_max THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('%s must be an integer from %s to %s, not %s',
                                        p_name, p_min, p_max, pg_catalog.quote_literal(v_text)),
            HINT = pg_catalog.format('e.g. ALTER DATABASE <db> SET %s = %s; empty or unset '
                                     'means %s.', p_name, p_default, p_default);
    END IF;
    RETURN v_text::integer;
END
$$;

REVOKE ALL ON FUNCTION undolog.integer_setting_value(text, text, integer, integer, integer)
FROM public;
