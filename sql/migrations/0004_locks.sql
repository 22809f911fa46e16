-- The engine's advisory locks are its own. intercept holds a session's lock shared while
-- it journals a call; lock_session and recover take it exclusive; the migration runner
-- and a call signature's lock are advisory too. A lock key is visible in pg_locks, so any
-- login that may call pg_advisory_lock could hold a session's key and stall its
-- intercepts and heartbeats while recover skipped it as "alive": the dead agent's session
-- stayed active and its work was never undone. So EXECUTE on every advisory-lock function
-- of pg_catalog (lock, try, shared, transaction-level, unlock; bigint and (int, int)
-- forms) is revoked from PUBLIC in this database; sql/grants.sql grants them back to the
-- schema's owner (the SECURITY DEFINER functions and the migration runner run as it).
-- Other applications in the same database that use advisory locks must be granted
-- EXECUTE explicitly (docs/how-to/roles.md).
-- Only a superuser can change the privileges of pg_catalog's functions (their owner is
-- the bootstrap superuser). Migrated by a database owner that is not one, this changes
-- nothing and says so (a WARNING); `undolog health` reports whether the revocation is in
-- place, and docs/how-to/roles.md gives the statements for a superuser to run.
DO $locks$
DECLARE
    v_fn regprocedure;
BEGIN
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user) THEN
        RAISE WARNING USING
            MESSAGE = 'advisory-lock functions left executable by PUBLIC: revoking needs a '
                      'superuser',
            DETAIL = 'Any login of this database can hold an UndoLog session''s advisory '
                     'lock and stall its agent and its recovery.',
            HINT = 'Have a superuser run the statements in docs/how-to/roles.md; '
                   '`undolog health` shows whether they are in place.';
        RETURN;
    END IF;
    FOR v_fn IN
        SELECT p.oid::regprocedure
        FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND p.proname ~ '^pg_(try_)?advisory_'
        ORDER BY p.oid
    LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', v_fn);
    END LOOP;
END
$locks$;
