-- undolog.database_setting: the database-wide value of a setting (ALTER DATABASE <db> SET
-- <name> = ...), or NULL when it is not set there. Read from the catalogue
-- (pg_db_role_setting with no role), never with current_setting: any login may SET a
-- custom setting in its own session, and may even set its own per-role default (ALTER
-- ROLE ... SET), so neither may decide what the engine allows an agent.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its query was
-- parsed and planned again in every transaction that called it (some 100 µs; every
-- begin_session reads undolog.max_live_sessions through it), where PL/pgSQL keeps its
-- plan for the backend's life.
CREATE OR REPLACE FUNCTION undolog.database_setting(p_name text)
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RETURN (
        SELECT pg_catalog.substr(c.setting, pg_catalog.length(p_name) + 2)
        FROM pg_catalog.pg_db_role_setting AS d
        CROSS JOIN LATERAL pg_catalog.unnest(d.setconfig) AS c (setting)
        WHERE d.setrole = 0
          AND d.setdatabase = (SELECT db.oid FROM pg_catalog.pg_database AS db
                               WHERE db.datname = pg_catalog.current_database())
          AND pg_catalog.starts_with(c.setting, p_name || '=')
    );
END
$$;

REVOKE ALL ON FUNCTION undolog.database_setting(text) FROM public;
