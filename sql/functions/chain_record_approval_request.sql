-- undolog.chain_record_approval_request: the canonical record of an approval request as
-- it was made (the first of its two links; see undolog.chain_record_session_history).
CREATE OR REPLACE FUNCTION undolog.chain_record_approval_request(
    p_session_id uuid, p_approval_id uuid, p_effect_id uuid, p_executed_at timestamptz,
    p_requested_at timestamptz, p_expires_at timestamptz
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'approval_requests', 'event', 'request', 'session_id', p_session_id,
        'approval_id', p_approval_id, 'effect_id', p_effect_id,
        'executed_at', undolog.chain_time(p_executed_at),
        'requested_at', undolog.chain_time(p_requested_at),
        'expires_at', undolog.chain_time(p_expires_at)
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.chain_record_approval_request(
    uuid, uuid, uuid, timestamptz, timestamptz, timestamptz
) FROM public;
