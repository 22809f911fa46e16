-- undolog.agent_rollback_to_allowed: whether an agent may call rollback_to on its own
-- sessions in this database. Off unless the database's owner (or a superuser) set
--     ALTER DATABASE <db> SET undolog.agent_rollback_to = on;
-- Only the database-wide value counts (undolog.database_setting): a login's own SET
-- cannot grant a power to the agent itself.
-- PL/pgSQL, not SQL, as undolog.database_setting: a SQL function with a SET clause is
-- never inlined and is planned again in every transaction that calls it.
CREATE OR REPLACE FUNCTION undolog.agent_rollback_to_allowed()
RETURNS boolean
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RETURN coalesce(
        pg_catalog.lower(pg_catalog.btrim(undolog.database_setting('undolog.agent_rollback_to')))
        IN ('on', 'true', 'yes', '1'), false);
END
$$;

REVOKE ALL ON FUNCTION undolog.agent_rollback_to_allowed() FROM public;
