-- docs/how-to/roles.md: advisory locks in the engine's database. Run as a superuser in
-- that database; tests/engine/test_hostile_logins.py runs it and checks what each login may do.
-- Another application's role that needs advisory locks (here `jobs`, made if missing).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobs') THEN
        CREATE ROLE jobs LOGIN;
    END IF;
END
$$;

-- --8<-- [start:grant]
GRANT EXECUTE ON FUNCTION pg_catalog.pg_advisory_xact_lock(bigint),
                          pg_catalog.pg_try_advisory_lock(bigint),
                          pg_catalog.pg_advisory_unlock(bigint) TO jobs;
-- --8<-- [end:grant]

-- --8<-- [start:revoke]
-- What migration 0004_locks does when a superuser migrates: PUBLIC loses every advisory-
-- lock function of pg_catalog, the owner of schema undolog keeps them.
DO $$
DECLARE
    f regprocedure;
    engine_owner name := (SELECT pg_get_userbyid(nspowner) FROM pg_namespace
                          WHERE nspname = 'undolog');
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
             WHERE p.pronamespace = 'pg_catalog'::regnamespace
               AND p.proname ~ '^pg_(try_)?advisory_'
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, engine_owner);
    END LOOP;
END
$$;
-- --8<-- [end:revoke]
