-- undolog.setting_integer: an integer from a custom GUC (e.g. undolog.default_max_attempts)
-- within [p_min, p_max], or p_default when the GUC is unset or empty; UL008 otherwise
-- (undolog.integer_setting_value).
CREATE OR REPLACE FUNCTION undolog.setting_integer(
    p_name text, p_default integer, p_min integer, p_max integer
)
RETURNS integer
LANGUAGE sql
STABLE
AS $$
    SELECT undolog.integer_setting_value(
        p_name, pg_catalog.current_setting(p_name, true), p_default, p_min, p_max)
$$;

REVOKE ALL ON FUNCTION undolog.setting_integer(text, integer, integer, integer) FROM public;
