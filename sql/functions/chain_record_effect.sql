-- undolog.chain_record_effect: the canonical record of an event a journaled call's own
-- row records (migration 0013; see undolog.chain_record_session_history for what a
-- canonical record is): p_event 'created' (intercept: the call, who made it and when;
-- its starting state follows from its tier) or 'committed' (the same, then when and by
-- whom it committed and the result replays return: the whole call, so that a COMPENSABLE
-- call that commits before any other change has one link for both events). A created
-- record's commit fields are null.
CREATE OR REPLACE FUNCTION undolog.chain_record_effect(
    p_event text, p_session_id uuid, p_effect_id uuid, p_executed_at timestamptz,
    p_call_signature text, p_step_index integer, p_tool_name text, p_tier text,
    p_args jsonb, p_intercepted_by text, p_tool_id uuid, p_committed_at timestamptz,
    p_committed_by text, p_result_snapshot jsonb
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'effect_log', 'event', p_event, 'session_id', p_session_id,
        'effect_id', p_effect_id, 'executed_at', undolog.chain_time(p_executed_at),
        'call_signature', p_call_signature, 'step_index', p_step_index,
        'tool_name', p_tool_name, 'tier', p_tier, 'args', p_args,
        'intercepted_by', p_intercepted_by, 'tool_id', p_tool_id,
        'committed_at', undolog.chain_time(p_committed_at), 'committed_by', p_committed_by,
        'result', p_result_snapshot
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.chain_record_effect(
    text, uuid, uuid, timestamptz, text, integer, text, text, jsonb, text, uuid, timestamptz,
    text, jsonb
) FROM public;
