-- undolog.drop_old_partitions(p_older_than, p_detach_only, p_in_use): the work shared by
-- drop_partitions ('refuse' or 'force') and maintain_partitions ('skip'). Here: 'skip'
-- keeps a month an unfinished session holds, with its history, and reports it; the other
-- months go, effect log before history; a bad mode is refused. Internal.
BEGIN;
SELECT plan(8);
SET LOCAL client_min_messages = error;

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

SELECT has_function('undolog', 'drop_old_partitions',
                    ARRAY['timestamp with time zone', 'boolean', 'text'],
                    'undolog.drop_old_partitions(timestamptz, boolean, text) exists');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r
      WHERE r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND has_function_privilege(r.oid, 'undolog.drop_old_partitions(timestamptz, boolean, text)', 'EXECUTE')$$,
    'internal: no group role may call it');
SELECT throws_ok($$SELECT * FROM undolog.drop_old_partitions('2000-01-01', false, 'maybe')$$,
                 'UL008', NULL, 'mode ''maybe'': UL008');

SELECT FROM generate_series(1, 3) AS m,
            LATERAL undolog.create_month_partitions(make_date(1994, m, 1)) AS c;
SELECT FROM pg_temp.add_effect(pg_temp.add_session('completed'), '1994-01-05+00');
SELECT FROM pg_temp.add_effect(pg_temp.add_session('halted'), '1994-02-05+00');
SELECT FROM pg_temp.add_effect(pg_temp.add_session('compensated'), '1994-03-05+00');

SELECT results_eq(
    $$SELECT * FROM undolog.drop_old_partitions('1994-04-01+00', false, 'skip')$$,
    $$VALUES ('skipped', 'undolog_effect_log_1994_02'),
             ('dropped', 'undolog_effect_log_1994_01'), ('dropped', 'undolog_effect_log_1994_03'),
             ('dropped', 'undolog_effect_history_1994_01'), ('dropped', 'undolog_effect_history_1994_03')$$,
    'skip: February (a halted session) is reported and kept; January and March go');
SELECT has_table('undolog', 'undolog_effect_log_1994_02', 'February''s effect log is kept');
SELECT has_table('undolog', 'undolog_effect_history_1994_02', '... and its history with it');
SELECT is((SELECT count(*) FROM undolog.undolog_signature_registry
           WHERE executed_at >= '1994-01-01+00' AND executed_at < '1994-04-01+00'),
          1::bigint, 'only February''s registry row is left');
SELECT results_eq(
    $$SELECT * FROM undolog.drop_old_partitions('1994-04-01+00', true, 'force')$$,
    $$VALUES ('detached', 'undolog_effect_log_1994_02'), ('detached', 'undolog_effect_history_1994_02')$$,
    'force, detach-only: February is detached');

SELECT * FROM finish();
ROLLBACK;
