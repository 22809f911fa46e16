-- undolog.max_nesting_depth: the deepest nesting of objects and arrays accepted in args,
-- results, metadata and descriptors ('{}' is one level). The Python binding enforces the
-- same limit (undolog.signature.MAX_NESTING_DEPTH) before signing: its recursion gives
-- out near 1,000 levels while jsonb accepts far more, so one documented limit for all.
-- undolog.payload_bytes_unless_refused and undolog.check_payload spell the jsonpath level
-- (64) out (a jsonpath level cannot be a parameter): keep them in step.
CREATE OR REPLACE FUNCTION undolog.max_nesting_depth()
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT 64
$$;

REVOKE ALL ON FUNCTION undolog.max_nesting_depth() FROM public;
