-- undolog.payload_text_bytes: the length in bytes of a jsonb value's JSON text (what
-- p_value::text builds), or NULL when that is certainly over undolog.max_payload_bytes()
-- or has no bound worth building, found without building it. Text is built only when it
-- is bounded: at most 6 times the jsonb size (a control character prints as \u0001) plus
-- what its numbers print, which is summed first without printing them:
--   * a jsonb value is at most 4 times its text ([0, 0]: 12 bytes of jsonb an element of
--     3 bytes of text), so over 16 times the limit as jsonb it is over the limit as text;
--     a compressed value (read from a table) is measured uncompressed;
--   * a number of 1e309 or more prints an integer part of unbounded length (1e131071 is
--     131,072 digits): NULL at the first (undolog.numbers_fit refuses it anyway);
--   * the others print their integer part (at most 309 digits), a point, a sign and
--     scale() digits after the point, however few bytes they take as jsonb (0e-16383 is
--     20 bytes of jsonb and 16,385 of text): NULL as soon as their sum is over the limit.
-- What is built is then at most ~6 x 16 MiB + 1 MiB, never near PostgreSQL's 1 GB.
CREATE OR REPLACE FUNCTION undolog.payload_text_bytes(p_value jsonb)
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_limit constant bigint := undolog.max_payload_bytes();
    v_numbers bigint := 0;
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
    -- one array of the numbers, then its elements: jsonb_path_query's rows take ~15 us
    -- each on a value of 200,000 numbers, these ~1 us
    FOR v_number IN
        SELECT q.x::numeric
        FROM pg_catalog.jsonb_array_elements(pg_catalog.jsonb_path_query_array(
            p_value, 'strict $.** ? (@.type() == "number")')) AS q (x)
    LOOP
        IF pg_catalog.abs(v_number) >= 1e309 THEN
            RETURN NULL;
        END IF;
        v_numbers := v_numbers
            + pg_catalog.octet_length(pg_catalog.trunc(pg_catalog.abs(v_number))::text)
            + pg_catalog.scale(v_number) + (pg_catalog.scale(v_number) > 0)::integer
            + (v_number < 0)::integer;
        IF v_numbers > v_limit THEN
            RETURN NULL;
        END IF;
    END LOOP;
    RETURN pg_catalog.octet_length(p_value::text);
END
$$;

REVOKE ALL ON FUNCTION undolog.payload_text_bytes(jsonb) FROM public;
