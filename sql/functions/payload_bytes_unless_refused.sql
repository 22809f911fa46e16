-- undolog.payload_bytes_unless_refused: the length in bytes of a jsonb payload's JSON text
-- (what p_value::text builds), or NULL when the payload is refused: it nests deeper than
-- undolog.max_nesting_depth() levels, holds a number no finite double holds
-- (undolog.numbers_fit's range, found in the same walk), or is certainly over
-- undolog.max_payload_bytes() (found without building the text). A length is not a
-- verdict: it may still be over the limit, which the caller compares (payload_fits).
-- One function for the three, since one walk over the numbers answers both their range
-- and what they print: a payload of many numbers is walked once (docs/performance-log.md,
-- "Numbers checked before a payload is printed"; it was payload_text_bytes there).
-- Text is built only when it is bounded: at most 6 times the jsonb size (a control
-- character prints as \u0001) plus what its numbers print beyond that, which is summed
-- first without printing them:
--   * a jsonb value is at most 4 times its text ([0, 0]: 12 bytes of jsonb an element of
--     3 bytes of text), so over 16 times the limit as jsonb it is over the limit as text;
--     a compressed value (read from a table) is measured uncompressed;
--   * one walk collects the numbers, and one aggregate over them answers their least and
--     greatest (beyond ±1.7976931348623158e308: NULL, before any is printed; 1e131071
--     prints 131,072 digits) and their scale() (the digits printed after the point,
--     however few bytes they take as jsonb: 0e-16383 is 20 bytes and 16,385 characters);
--     a non-zero number closer to 0 than 4.9406564584124654e-324 has a scale of 324 or
--     more, so only then is the value walked again for one;
--   * a number takes at least 10 bytes of jsonb (its entry and its numeric), so one under
--     1e15 prints its sign, integer part and point in under 6 times that: only the scale
--     counts beyond the 6 times; one of 1e15 or more (rare) also counts its integer
--     digits (at most 309 by then), summed over those alone, stopping over the limit;
--   * NULL as soon as the scales and those digits are over the limit: they are printed.
-- What is built is then at most ~6 x 16 MiB + 1 MiB, never near PostgreSQL's 1 GB.
-- The depth is found first (after NULL for NULL, and for a value of over 16 times the
-- limit as jsonb), by a walk that stops at level 64 (more than 64 levels means some
-- object or array sits at jsonpath level 64; level 0 is the value itself): the walks of
-- every level ($.**) come after it, since jsonb takes 12,000 levels, into which they
-- recurse until 54001 "stack depth limit exceeded".
CREATE OR REPLACE FUNCTION undolog.payload_bytes_unless_refused(p_value jsonb)
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_limit constant bigint := undolog.max_payload_bytes();
    v_printed bigint;
    v_max_scale integer;
    v_least numeric;
    v_greatest numeric;
    v_number numeric;
BEGIN
    IF p_value IS NULL THEN
        RETURN NULL;
    END IF;
    -- jsonb || an empty container answers the value itself, decompressed
    IF pg_catalog.pg_column_size(CASE WHEN pg_catalog.pg_column_compression(p_value) IS NULL
                                      THEN p_value
                                      ELSE p_value || '[]'::jsonb END) > 16 * v_limit THEN
        RETURN NULL;
    END IF;
    IF pg_catalog.jsonb_path_exists(
        p_value, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")') THEN
        RETURN NULL;
    END IF;
    -- one array of the numbers, then one aggregate over its elements: jsonb_path_query's
    -- rows take ~15 us each on a value of 200,000 numbers, these well under 1 us
    SELECT coalesce(sum(q.s), 0), max(q.s), min(q.n), max(q.n)
    INTO v_printed, v_max_scale, v_least, v_greatest
    FROM (
        SELECT
            e.x::numeric,
            pg_catalog.scale(e.x::numeric)
        FROM pg_catalog.jsonb_array_elements(pg_catalog.jsonb_path_query_array(
            p_value, 'strict $.** ? (@.type() == "number")')) AS e (x)
        OFFSET 0  -- each element cast once
    ) AS q (n, s);
    IF v_greatest > 1.7976931348623158e308 OR v_least < -1.7976931348623158e308 THEN
        RETURN NULL;
    END IF;
    IF v_max_scale >= 324 AND pg_catalog.jsonb_path_exists(
        p_value, 'strict $.** ? (@.type() == "number" && @ != 0
                                 && @ < 4.9406564584124654e-324
                                 && @ > -4.9406564584124654e-324)') THEN
        RETURN NULL;
    END IF;
    IF v_printed > v_limit THEN
        RETURN NULL;
    END IF;
    IF v_greatest >= 1e15 OR v_least <= -1e15 THEN
        FOR v_number IN
            SELECT e.x::numeric
            FROM pg_catalog.jsonb_array_elements(pg_catalog.jsonb_path_query_array(
                p_value, 'strict $.** ? (@.type() == "number" && (@ >= 1e15 || @ <= -1e15))'))
                AS e (x)
        LOOP
            v_printed := v_printed
                + pg_catalog.octet_length(pg_catalog.trunc(pg_catalog.abs(v_number))::text);
            IF v_printed > v_limit THEN
                RETURN NULL;
            END IF;
        END LOOP;
    END IF;
    RETURN pg_catalog.octet_length(p_value::text);
END
$$;

REVOKE ALL ON FUNCTION undolog.payload_bytes_unless_refused(jsonb) FROM public;
