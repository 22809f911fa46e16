-- undolog.chain_record_session_history: the canonical record of an
-- undolog_session_history row, the text its chain hash covers (undolog.chain_hash).
-- json_build_object's text: the keys in the order written here, ' : ' and ', ' between
-- (json, not jsonb: no sorting of keys, half the cost per row). Never re-encoded:
-- whoever checks a hash hashes this very text (undolog.chain_events, `undolog export`).
-- The columns are named one by one: a column a later migration adds does not change
-- the record, and so the hash, of the rows already written.
CREATE OR REPLACE FUNCTION undolog.chain_record_session_history(
    p_session_id uuid, p_history_id bigint, p_from_state text, p_to_state text,
    p_at timestamptz, p_actor text, p_detail jsonb
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'session_history', 'session_id', p_session_id, 'history_id', p_history_id,
        'from_state', p_from_state, 'to_state', p_to_state, 'at', undolog.chain_time(p_at),
        'actor', p_actor, 'detail', p_detail
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.chain_record_session_history(
    uuid, bigint, text, text, timestamptz, text, jsonb
) FROM public;
