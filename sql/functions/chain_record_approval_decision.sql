-- undolog.chain_record_approval_decision: the canonical record of an approval request's
-- decision (its second link; see undolog.chain_record_session_history).
CREATE OR REPLACE FUNCTION undolog.chain_record_approval_decision(
    p_session_id uuid, p_approval_id uuid, p_state text, p_decided_at timestamptz,
    p_decided_by text, p_reason text, p_decided_role text
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'approval_requests', 'event', 'decision', 'session_id', p_session_id,
        'approval_id', p_approval_id, 'state', p_state,
        'decided_at', undolog.chain_time(p_decided_at), 'decided_by', p_decided_by,
        'reason', p_reason, 'decided_role', p_decided_role
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.chain_record_approval_decision(
    uuid, uuid, text, timestamptz, text, text, text
) FROM public;
