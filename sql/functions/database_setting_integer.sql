-- undolog.database_setting_integer: an integer from the database's own value of a custom
-- setting (ALTER DATABASE d SET p_name = ...; undolog.database_setting, never the
-- session's: a login's own SET must not lift what the engine allows it) within
-- [p_min, p_max], or p_default when it is unset or empty; UL008 otherwise
-- (undolog.integer_setting_value). The database-wide twin of undolog.setting_integer.
-- PL/pgSQL, not SQL, as undolog.database_setting: its readers run it in every
-- transaction that checks a bound, and PL/pgSQL keeps its plan for the backend's life.
CREATE OR REPLACE FUNCTION undolog.database_setting_integer(
    p_name text, p_default integer, p_min integer, p_max integer
)
RETURNS integer
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RETURN undolog.integer_setting_value(
        p_name, undolog.database_setting(p_name), p_default, p_min, p_max);
END
$$;

REVOKE ALL ON FUNCTION undolog.database_setting_integer(text, integer, integer, integer)
FROM public;
