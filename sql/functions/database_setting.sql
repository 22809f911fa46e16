-- undolog.database_setting: the database-wide value of a setting (ALTER DATABASE <db> SET
-- <name> = ...), or NULL when it is not set there. Read from the catalogue
-- (pg_db_role_setting with no role), never with current_setting: any login may SET a
-- custom setting in its own session, and may even set its own per-role default (ALTER
-- ROLE ... SET), so neither may decide what the engine allows an agent.
CREATE OR REPLACE FUNCTION undolog.database_setting(p_name text)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = undolog, pg_temp
AS $$
    SELECT pg_catalog.substr(c.setting, pg_catalog.length(p_name) + 2)
    FROM pg_catalog.pg_db_role_setting AS d
    CROSS JOIN LATERAL pg_catalog.unnest(d.setconfig) AS c (setting)
    WHERE d.setrole = 0
      AND d.setdatabase = (SELECT db.oid FROM pg_catalog.pg_database AS db
                           WHERE db.datname = pg_catalog.current_database())
      AND pg_catalog.starts_with(c.setting, p_name || '=')
$$;

REVOKE ALL ON FUNCTION undolog.database_setting(text) FROM public;
