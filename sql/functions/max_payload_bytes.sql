-- undolog.max_payload_bytes: the largest args, result or compensation accepted (as jsonb).
-- One place, so that intercept, commit and the docs agree. 1 MiB.
CREATE OR REPLACE FUNCTION undolog.max_payload_bytes()
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT 1048576
$$;

REVOKE ALL ON FUNCTION undolog.max_payload_bytes() FROM public;
