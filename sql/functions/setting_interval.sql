-- undolog.setting_interval: a positive interval from a custom GUC (e.g.
-- undolog.claim_timeout), or p_default when the GUC is unset or empty; UL008 otherwise
-- (undolog.interval_setting_value).
CREATE OR REPLACE FUNCTION undolog.setting_interval(p_name text, p_default interval)
RETURNS interval
LANGUAGE sql
STABLE
AS $$
    SELECT undolog.interval_setting_value(
        p_name, pg_catalog.current_setting(p_name, true), p_default, NULL)
$$;

REVOKE ALL ON FUNCTION undolog.setting_interval(text, interval) FROM public;
