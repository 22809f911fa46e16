-- undolog.effect_time: the executed_at an effect id made by undolog.effect_id_at carries,
-- to the microsecond. For any other id (an effect journaled before migration 0014, or an
-- id no one issued) it answers a time that is no effect's: a lookup by the effect log's
-- primary key with it finds nothing, and the caller falls back to the undo stack.
CREATE OR REPLACE FUNCTION undolog.effect_time(p_effect_id uuid)
RETURNS timestamptz
LANGUAGE sql
IMMUTABLE
STRICT
PARALLEL SAFE
AS $$
    -- Immutable parts only (to_timestamp of seconds, not timestamptz + interval, which is
    -- STABLE), so that the planner inlines it and prunes partitions with it.
    SELECT pg_catalog.to_timestamp(
        (('x' || pg_catalog.substr(p_effect_id::text, 1, 8)
          || pg_catalog.substr(p_effect_id::text, 10, 4))::bit(48)::bigint * 1000
         + ('x' || pg_catalog.substr(p_effect_id::text, 16, 3))::bit(12)::integer
        )::double precision / 1000000
    )
$$;

REVOKE ALL ON FUNCTION undolog.effect_time(uuid) FROM public;
