-- undolog.effect_id_at: a new effect's id, which carries its executed_at. RFC 9562
-- version 7: 48 bits of Unix milliseconds, then in rand_a (12 bits) the microseconds
-- within that millisecond (RFC 9562 section 6.2, method 3: sub-millisecond precision),
-- then 62 random bits. undolog.effect_time reads the timestamp back exactly, so commit
-- finds the effect's partition and row by its primary key from the id alone, with no
-- lookup. The ids of one transaction's calls share their time (now()) and differ in their
-- random bits; they still land at the right edge of their indexes, as uuid_v7's do.
CREATE OR REPLACE FUNCTION undolog.effect_id_at(p_at timestamptz)
RETURNS uuid
LANGUAGE sql
VOLATILE
PARALLEL SAFE
AS $$
    -- One expression, no FROM: the planner inlines it into intercept's INSERT.
    SELECT pg_catalog.encode(
        pg_catalog.overlay(
            pg_catalog.uuid_send(pg_catalog.gen_random_uuid()),
            -- Bytes 0-5: milliseconds; bytes 6-7: version 7, then the microseconds.
            pg_catalog.substring(
                pg_catalog.int8send(pg_catalog.floor(extract(EPOCH FROM p_at) * 1000)::bigint), 3)
            || pg_catalog.int2send(
                (28672 + (extract(EPOCH FROM p_at) * 1000000)::bigint % 1000)::smallint),
            1,
            8
        ),
        'hex'
    )::uuid
$$;

REVOKE ALL ON FUNCTION undolog.effect_id_at(timestamptz) FROM public;
