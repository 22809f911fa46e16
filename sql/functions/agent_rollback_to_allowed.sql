-- undolog.agent_rollback_to_allowed: whether an agent may call rollback_to on its own
-- sessions in this database. Off unless the database's owner (or a superuser) set
--     ALTER DATABASE <db> SET undolog.agent_rollback_to = on;
-- Read from the catalogue (the database-wide setting, pg_db_role_setting with no role),
-- never with current_setting: any login may SET a custom setting in its own session, and
-- may even set its own per-role default (ALTER ROLE ... SET), so neither can be what
-- grants a power to the agent itself.
CREATE OR REPLACE FUNCTION undolog.agent_rollback_to_allowed()
RETURNS boolean
LANGUAGE sql
STABLE
SET search_path = undolog, pg_temp
AS $$
    SELECT coalesce(pg_catalog.bool_or(
        pg_catalog.lower(pg_catalog.substr(c.setting, pg_catalog.strpos(c.setting, '=') + 1))
        IN ('on', 'true', 'yes', '1')), false)
    FROM pg_catalog.pg_db_role_setting AS d
    CROSS JOIN LATERAL pg_catalog.unnest(d.setconfig) AS c (setting)
    WHERE d.setrole = 0
      AND d.setdatabase = (SELECT db.oid FROM pg_catalog.pg_database AS db
                           WHERE db.datname = pg_catalog.current_database())
      AND pg_catalog.split_part(c.setting, '=', 1) = 'undolog.agent_rollback_to'
$$;

REVOKE ALL ON FUNCTION undolog.agent_rollback_to_allowed() FROM public;
