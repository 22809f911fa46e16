-- undolog.payload_fits: whether a jsonb value is within the payload limits: every number
-- one a finite double holds (undolog.numbers_fit), at most max_payload_bytes of JSON text,
-- and at most max_nesting_depth levels of objects and arrays. NULL fits (callers decide
-- whether NULL is allowed); never NULL otherwise.
-- The order bounds the work: nothing is printed before it is known to be bounded, and no
-- walk recurses deeper than 64 levels before the depth is known. A small value's numbers
-- are checked first (below). A larger one goes to undolog.payload_bytes_unless_refused
-- (its text length, or NULL when refused), whose one call (p_value is referenced once:
-- an argument such as $1::jsonb is parsed again for each reference of an inlined
-- function) checks its depth by a walk that stops at level 64 (jsonb takes 12,000
-- levels, which a walk of every level recurses into until 54001 "stack depth limit
-- exceeded"), then, in one walk over its numbers, refuses a number no double holds and
-- sums what they print, before it builds the text (a number like 1e131071 is a few bytes
-- of jsonb and 131,072 digits of text: NULL at once). The size is
-- the value's text, not pg_column_size: a value read from a table arrives compressed, and
-- its stored size says nothing of what it holds (8 MiB of args built in a temp table
-- measured 96 kB).
-- The common case prints nothing (a conversion to text is ~6 us): an uncompressed value
-- of under 512 bytes as jsonb whose numbers fit is within both limits. Its text is at
-- most 6 bytes a byte (escapes) but for its numbers, and a number takes at least 10
-- bytes of jsonb (its entry and its numeric), so it holds at most 51, each printing at
-- most 309 + 16,383 + 2 characters (integer digits, scale, point, sign): under 1 MiB in
-- all. Each level of nesting takes at least 8 bytes of jsonb (a container's header and
-- its entry in the parent), so it cannot reach 65 levels, and numbers_fit's walk of
-- every level is bounded.
CREATE OR REPLACE FUNCTION undolog.payload_fits(p_value jsonb)
RETURNS boolean
LANGUAGE sql
STABLE  -- as pg_column_size is: an IMMUTABLE body calling it would never be inlined
PARALLEL SAFE
AS $$
    SELECT p_value IS NULL
        OR (pg_catalog.pg_column_size(p_value) < 512
            AND pg_catalog.pg_column_compression(p_value) IS NULL
            AND undolog.numbers_fit(p_value))
        OR coalesce(undolog.payload_bytes_unless_refused(p_value) <= undolog.max_payload_bytes(),
                    FALSE)
$$;

REVOKE ALL ON FUNCTION undolog.payload_fits(jsonb) FROM public;
