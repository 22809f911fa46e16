-- undolog.chain_record_effect_created: the canonical record of an effect's creation, the
-- first of the two events its own row records (migration 0013; see
-- undolog.chain_record_session_history for what a canonical record is). Everything
-- intercept fixed about the call: who made it, when, in which session, and what it is.
-- Its starting state follows from its tier (effect_log_guard admits no other).
CREATE OR REPLACE FUNCTION undolog.chain_record_effect_created(
    p_session_id uuid, p_effect_id uuid, p_executed_at timestamptz, p_call_signature text,
    p_step_index integer, p_tool_name text, p_tier text, p_args jsonb,
    p_intercepted_by text, p_tool_id uuid
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'effect_log', 'event', 'created', 'session_id', p_session_id,
        'effect_id', p_effect_id, 'executed_at', undolog.chain_time(p_executed_at),
        'call_signature', p_call_signature, 'step_index', p_step_index,
        'tool_name', p_tool_name, 'tier', p_tier, 'args', p_args,
        'intercepted_by', p_intercepted_by, 'tool_id', p_tool_id
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.chain_record_effect_created(
    uuid, uuid, timestamptz, text, integer, text, text, jsonb, text, uuid
) FROM public;
