-- undolog.check_payload: refuse a jsonb argument larger than max_payload_bytes (UL009).
CREATE OR REPLACE FUNCTION undolog.check_payload(p_what text, p_value jsonb)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
AS $$
BEGIN
    IF pg_catalog.pg_column_size(p_value) > undolog.max_payload_bytes() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL009',
            MESSAGE = pg_catalog.format('%s is %s bytes, over the limit of %s bytes',
                                        p_what, pg_catalog.pg_column_size(p_value),
                                        undolog.max_payload_bytes());
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_payload(text, jsonb) FROM public;
