-- undolog.payload_fits: whether a jsonb value is within the payload limits: at most
-- max_payload_bytes of JSON text, and at most max_nesting_depth levels of objects and
-- arrays. The size is the value's text, not pg_column_size: a value read from a table
-- arrives compressed, and its stored size says nothing of what it holds (8 MiB of args
-- built in a temp table measured 96 kB). Depth: more than 64 levels means some object
-- or array sits at jsonpath level 64 (level 0 is the value itself); a value whose text
-- holds at most 64 brackets cannot be that deep, which spares the path walk almost
-- always. NULL fits (callers decide whether NULL is allowed).
-- The common case costs no conversion to text (which is ~6 us): an uncompressed value of
-- under 512 bytes as jsonb fits both limits, since its text is at most 6 bytes per byte
-- (escapes) and each level of nesting takes at least 8 bytes of jsonb (a container's
-- header and its entry in the parent), so it cannot reach 65 levels.
CREATE OR REPLACE FUNCTION undolog.payload_fits(p_value jsonb)
RETURNS boolean
LANGUAGE sql
STABLE  -- as pg_column_size is: an IMMUTABLE body calling it would never be inlined
PARALLEL SAFE
AS $$
    SELECT p_value IS NULL
        OR (pg_catalog.pg_column_size(p_value) < 512
            AND pg_catalog.pg_column_compression(p_value) IS NULL)
        OR (pg_catalog.octet_length(p_value::text) <= undolog.max_payload_bytes()
            AND (pg_catalog.octet_length(p_value::text)
                 - pg_catalog.octet_length(pg_catalog.translate(p_value::text, '[{', ''))
                 <= undolog.max_nesting_depth()
                 OR NOT pg_catalog.jsonb_path_exists(
                     p_value, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")')))
$$;

REVOKE ALL ON FUNCTION undolog.payload_fits(jsonb) FROM public;
