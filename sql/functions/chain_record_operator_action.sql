-- undolog.chain_record_operator_action: the canonical record of an
-- undolog_operator_actions row (see undolog.chain_record_session_history).
CREATE OR REPLACE FUNCTION undolog.chain_record_operator_action(
    p_session_id uuid, p_action_id bigint, p_action text, p_undo_id uuid,
    p_performed_by text, p_reason text, p_at timestamptz, p_actor text
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'operator_actions', 'session_id', p_session_id, 'action_id', p_action_id,
        'action', p_action, 'undo_id', p_undo_id, 'performed_by', p_performed_by,
        'reason', p_reason, 'at', undolog.chain_time(p_at), 'actor', p_actor
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.chain_record_operator_action(
    uuid, bigint, text, uuid, text, text, timestamptz, text
) FROM public;
