-- undolog.chain_record_undo_history: the canonical record of an undolog_undo_history
-- row (see undolog.chain_record_session_history).
CREATE OR REPLACE FUNCTION undolog.chain_record_undo_history(
    p_session_id uuid, p_history_id bigint, p_undo_id uuid, p_event text,
    p_from_state text, p_to_state text, p_attempt integer, p_at timestamptz, p_actor text,
    p_detail jsonb
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'undo_history', 'session_id', p_session_id, 'history_id', p_history_id,
        'undo_id', p_undo_id, 'event', p_event, 'from_state', p_from_state,
        'to_state', p_to_state, 'attempt', p_attempt, 'at', undolog.chain_time(p_at),
        'actor', p_actor, 'detail', p_detail
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.chain_record_undo_history(
    uuid, bigint, uuid, text, text, text, integer, timestamptz, text, jsonb
) FROM public;
