-- undolog.anchor_record: the canonical record of an anchor (undolog_chain_anchors), the
-- text its hash covers: its number, its time and the heads it records.
CREATE OR REPLACE FUNCTION undolog.anchor_record(
    p_anchor_id bigint, p_at timestamptz, p_heads jsonb
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'chain_anchors', 'anchor_id', p_anchor_id, 'at', undolog.chain_time(p_at),
        'heads', p_heads
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.anchor_record(bigint, timestamptz, jsonb) FROM public;
