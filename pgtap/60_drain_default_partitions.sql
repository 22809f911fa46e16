-- undolog.drain_default_partitions(): every month with rows in a default partition (of
-- the effect log or of its history) gets its partitions, and the rows move there.
-- Normally the defaults are empty and it does nothing. Internal: no group role may call it.
BEGIN;
SELECT plan(9);
SET LOCAL client_min_messages = warning;

-- Fixtures, written directly as the owner: a session in any state (through the state
-- machine's own transitions) and an effect at a chosen executed_at with its registry row,
-- undo entry and (irreversible) approval request, as intercept would write them.
CREATE FUNCTION pg_temp.add_session(p_state text DEFAULT 'completed') RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid := gen_random_uuid();
    v_path text[] := CASE p_state
        WHEN 'active' THEN '{}'
        WHEN 'completed' THEN '{completed}'
        WHEN 'failed' THEN '{failed}'
        WHEN 'awaiting_approval' THEN '{awaiting_approval}'
        WHEN 'compensating' THEN '{failed,compensating}'
        WHEN 'halted' THEN '{failed,compensating,halted}'
        WHEN 'compensated' THEN '{failed,compensating,compensated}' END;
    v_state text;
BEGIN
    INSERT INTO undolog.undolog_sessions (session_id, lease_duration, lease_expires_at)
    VALUES (v_id, '5 minutes', now() + interval '5 minutes');
    FOREACH v_state IN ARRAY v_path LOOP
        UPDATE undolog.undolog_sessions SET state = v_state WHERE session_id = v_id;
    END LOOP;
    RETURN v_id;
END $$;
CREATE FUNCTION pg_temp.add_effect(
    p_session uuid, p_at timestamptz, p_tier text DEFAULT 'compensable'
) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid := gen_random_uuid();
    v_sig text := encode(sha256(convert_to(v_id::text, 'UTF8')), 'hex');
BEGIN
    INSERT INTO undolog.undolog_signature_registry (session_id, call_signature, effect_id, executed_at)
    VALUES (p_session, v_sig, v_id, p_at);
    INSERT INTO undolog.undolog_effect_log
        (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier, args, state)
    VALUES (v_id, p_session, p_at, v_sig, 0, 'tool', p_tier, '{"n": 1}',
            CASE p_tier WHEN 'compensable' THEN 'executing' ELSE 'pending' END);
    IF p_tier = 'compensable' THEN
        UPDATE undolog.undolog_effect_log SET state = 'committed', result_snapshot = '{"ok": true}'
        WHERE effect_id = v_id AND session_id = p_session AND executed_at = p_at;
        INSERT INTO undolog.undolog_undo_stack (session_id, effect_id, executed_at, compensation)
        VALUES (p_session, v_id, p_at, '{"name": "undo", "args": {}}');
    ELSE
        INSERT INTO undolog.undolog_undo_stack (session_id, effect_id, executed_at)
        VALUES (p_session, v_id, p_at);
        INSERT INTO undolog.undolog_approval_requests (session_id, effect_id, executed_at)
        VALUES (p_session, v_id, p_at);
    END IF;
    RETURN v_id;
END $$;

SELECT has_function('undolog', 'drain_default_partitions', ARRAY[]::text[],
                    'undolog.drain_default_partitions() exists');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r
      WHERE r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND has_function_privilege(r.oid, 'undolog.drain_default_partitions()', 'EXECUTE')$$,
    'internal: no group role may call it');
SELECT is_empty($$SELECT * FROM undolog.drain_default_partitions()$$,
                'empty defaults: nothing to drain');

-- Rows of three months in the defaults, one of them a history row alone (its effect's
-- month exists, its history month was dropped by hand).
SELECT FROM (SELECT pg_temp.add_session() AS s) AS x,
     LATERAL (VALUES ('1995-01-31 23:59:59.999999+00'::timestamptz), ('1995-03-01 00:00:00+00'))
         AS v (at),
     LATERAL pg_temp.add_effect(x.s, v.at) AS e;
SELECT FROM undolog.create_month_partitions('1995-06-01');
DROP TABLE undolog.undolog_effect_history_1995_06;
SELECT FROM pg_temp.add_effect(pg_temp.add_session(), '1995-06-10 00:00+00');
CREATE TEMP TABLE history_before AS SELECT * FROM undolog.undolog_effect_history;

SELECT set_eq(
    $$SELECT * FROM undolog.drain_default_partitions()$$,
    $$VALUES ('undolog_effect_log_1995_01'), ('undolog_effect_history_1995_01'),
             ('undolog_effect_log_1995_03'), ('undolog_effect_history_1995_03'),
             ('undolog_effect_history_1995_06')$$,
    'January, March and June''s history are created; nothing else');
SELECT is_empty($$SELECT * FROM undolog.undolog_effect_log_default$$, 'the effect log default is empty');
SELECT is_empty($$SELECT * FROM undolog.undolog_effect_history_default$$, 'the history default is empty');
SELECT is((SELECT count(*) FROM undolog.undolog_effect_history_1995_06), 3::bigint,
          'June''s history rows are in June''s new history partition');
SELECT set_eq($$SELECT * FROM undolog.undolog_effect_history$$, $$SELECT * FROM history_before$$,
              'every history row is there, unchanged');
SELECT is_empty($$SELECT * FROM undolog.drain_default_partitions()$$, 'drained: nothing more');

SELECT * FROM finish();
ROLLBACK;
