-- undolog.chain_record_effect_history: the canonical record of an
-- undolog_effect_history row (see undolog.chain_record_session_history).
CREATE OR REPLACE FUNCTION undolog.chain_record_effect_history(
    p_session_id uuid, p_effect_id uuid, p_executed_at timestamptz, p_history_id bigint,
    p_event text, p_from_state text, p_to_state text, p_at timestamptz, p_actor text,
    p_detail jsonb
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'effect_history', 'session_id', p_session_id, 'effect_id', p_effect_id,
        'executed_at', undolog.chain_time(p_executed_at), 'history_id', p_history_id,
        'event', p_event, 'from_state', p_from_state, 'to_state', p_to_state,
        'at', undolog.chain_time(p_at), 'actor', p_actor, 'detail', p_detail
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.chain_record_effect_history(
    uuid, uuid, timestamptz, bigint, text, text, text, timestamptz, text, jsonb
) FROM public;
