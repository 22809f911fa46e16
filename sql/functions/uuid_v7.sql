-- undolog.uuid_v7: a time-ordered UUID (RFC 9562 version 7: 48 bits of Unix milliseconds,
-- then random bits). Ids made in the order of the calls land at the right edge of their
-- indexes, where a random UUID would touch (and, after a checkpoint, write in full) a
-- random index page on every insert.
CREATE OR REPLACE FUNCTION undolog.uuid_v7()
RETURNS uuid
LANGUAGE sql
VOLATILE
PARALLEL SAFE
AS $$
    -- gen_random_uuid() is version 4 (bits 52-55 of byte 6, least significant first:
    -- 0100); setting bits 52 and 53 makes it 0111, version 7. Its variant bits stay.
    SELECT pg_catalog.encode(
        pg_catalog.set_bit(
            pg_catalog.set_bit(
                pg_catalog.overlay(
                    pg_catalog.uuid_send(pg_catalog.gen_random_uuid()),
                    pg_catalog.substring(
                        pg_catalog.int8send(
                            pg_catalog.floor(
                                extract(EPOCH FROM pg_catalog.clock_timestamp()) * 1000
                            )::bigint
                        ),
                        3
                    ),
                    1,
                    6
                ),
                52, 1
            ),
            53, 1
        ),
        'hex'
    )::uuid
$$;

REVOKE ALL ON FUNCTION undolog.uuid_v7() FROM public;
