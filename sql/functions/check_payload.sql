-- undolog.check_payload: refuse a jsonb argument outside the payload limits
-- (undolog.payload_fits), in this order, so that nothing oversized is ever printed and no
-- walk recurses into a value nested thousands deep (54001 "stack depth limit exceeded"):
-- nesting deeper than max_nesting_depth levels (UL009; found by a walk that stops at
-- level 64), then a number no finite double holds (UL008: bad input, as PostgreSQL's own
-- 22003 for a number out of range for its type), then more than max_payload_bytes of
-- JSON text (UL009; uncompressed; measured by undolog.payload_bytes_unless_refused, which
-- does not print what is certainly over: its NULL means that here, the depth and numbers
-- being known to fit). It raises whenever payload_fits is false.
CREATE OR REPLACE FUNCTION undolog.check_payload(p_what text, p_value jsonb)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
AS $$
DECLARE
    v_bytes bigint;
BEGIN
    IF undolog.payload_fits(p_value) THEN
        RETURN;
    END IF;
    IF pg_catalog.jsonb_path_exists(
        p_value, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL009',
            MESSAGE = pg_catalog.format('%s nests deeper than the limit of %s levels of '
                                        'objects and arrays', p_what,
                                        undolog.max_nesting_depth()),
            HINT = 'Flatten the JSON (fewer nested objects and arrays), or journal a reference '
                   'to it instead.';
    END IF;
    IF NOT undolog.numbers_fit(p_value) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format(
                '%s holds a number no finite double holds: beyond the largest '
                '(1.7976931348623157e308), or not 0 but closer to 0 than the smallest '
                '(4.9406564584124654e-324)', p_what),
            HINT = 'JSON readers (Python, JavaScript) cannot read such a number: send it as a '
                   'string (e.g. "1e400"), or journal a reference to it instead.';
    END IF;
    v_bytes := undolog.payload_bytes_unless_refused(p_value);
    IF v_bytes IS NULL OR v_bytes > undolog.max_payload_bytes() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL009',
            MESSAGE = CASE
                WHEN v_bytes IS NULL  -- certainly over: not printed to count it
                    THEN pg_catalog.format('%s is over the limit of %s bytes of JSON', p_what,
                                           undolog.max_payload_bytes())
                ELSE pg_catalog.format('%s is %s bytes of JSON, over the limit of %s bytes',
                                       p_what, v_bytes, undolog.max_payload_bytes())
            END,
            HINT = 'Journal something smaller: return a reference (an id, a URL) instead of the '
                   'whole object.';
    END IF;
    -- not reached: payload_fits is false only for what one of the above refuses
    RAISE EXCEPTION USING
        ERRCODE = 'UL009',
        MESSAGE = pg_catalog.format('%s is outside the payload limits', p_what),
        HINT = 'Journal something smaller and flatter, whose numbers a double holds: a '
               'reference (an id, a URL) instead of the whole object.';
END
$$;

REVOKE ALL ON FUNCTION undolog.check_payload(text, jsonb) FROM public;
