-- undolog.check_payload: refuse a jsonb argument over the payload limits (UL009): more
-- than max_payload_bytes of JSON text (uncompressed: see undolog.payload_fits), or nested
-- deeper than max_nesting_depth levels.
CREATE OR REPLACE FUNCTION undolog.check_payload(p_what text, p_value jsonb)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
AS $$
BEGIN
    IF undolog.payload_fits(p_value) THEN
        RETURN;
    END IF;
    IF pg_catalog.octet_length(p_value::text) > undolog.max_payload_bytes() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL009',
            MESSAGE = pg_catalog.format('%s is %s bytes of JSON, over the limit of %s bytes',
                                        p_what, pg_catalog.octet_length(p_value::text),
                                        undolog.max_payload_bytes()),
            HINT = 'Journal something smaller: return a reference (an id, a URL) instead of the '
                   'whole object; an operator may raise the limit with ALTER DATABASE ... SET '
                   'undolog.max_payload_bytes.';
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'UL009',
        MESSAGE = pg_catalog.format('%s nests deeper than the limit of %s levels of objects '
                                    'and arrays', p_what, undolog.max_nesting_depth()),
        HINT = 'Flatten the JSON (fewer nested objects and arrays), or journal a reference to it '
               'instead.';
END
$$;

REVOKE ALL ON FUNCTION undolog.check_payload(text, jsonb) FROM public;
