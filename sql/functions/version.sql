-- undolog.version: the version of the engine installed in this database, e.g. '0.1.0'.
-- The package's version (python/undolog/_version.py, which pyproject.toml reads too) is
-- written in by the runner when it applies this file: @UNDOLOG_VERSION@ below is
-- replaced, so the version has one source, and a new release re-applies this function
-- (its applied text, hence its checksum, changes). SECURITY DEFINER like every function
-- a role may call (pgtap/70_privileges.sql), though it reads nothing.
CREATE OR REPLACE FUNCTION undolog.version()
RETURNS text
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT '@UNDOLOG_VERSION@'::text
$$;

REVOKE ALL ON FUNCTION undolog.version() FROM public;
