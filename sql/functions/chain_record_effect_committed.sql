-- undolog.chain_record_effect_committed: the canonical record of an effect's commit, the
-- second of the two events its own row records (migration 0013; see
-- undolog.chain_record_session_history): when, by whom, and the result replays return.
CREATE OR REPLACE FUNCTION undolog.chain_record_effect_committed(
    p_session_id uuid, p_effect_id uuid, p_executed_at timestamptz,
    p_committed_at timestamptz, p_committed_by text, p_result_snapshot jsonb
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.json_build_object(
        'table', 'effect_log', 'event', 'committed', 'session_id', p_session_id,
        'effect_id', p_effect_id, 'executed_at', undolog.chain_time(p_executed_at),
        'committed_at', undolog.chain_time(p_committed_at), 'committed_by', p_committed_by,
        'result', p_result_snapshot
    )::text
$$;

REVOKE ALL ON FUNCTION undolog.chain_record_effect_committed(
    uuid, uuid, timestamptz, timestamptz, text, jsonb
) FROM public;
