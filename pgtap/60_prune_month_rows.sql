-- undolog.prune_month_rows(p_from, p_to): deletes the registry, undo and approval rows of
-- the effects whose executed_at lies in [p_from, p_to), through the append-only guards,
-- and nothing else; answers how many rows it deleted. Internal: no group role may call it.
BEGIN;
SELECT plan(9);

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

CREATE FUNCTION pg_temp.plain_rows(p_from timestamptz, p_to timestamptz) RETURNS text LANGUAGE sql AS $$
    SELECT format('registry=%s undo=%s approvals=%s',
        (SELECT count(*) FROM undolog.undolog_signature_registry AS t WHERE t.executed_at >= p_from AND t.executed_at < p_to),
        (SELECT count(*) FROM undolog.undolog_undo_stack AS t WHERE t.executed_at >= p_from AND t.executed_at < p_to),
        (SELECT count(*) FROM undolog.undolog_approval_requests AS t WHERE t.executed_at >= p_from AND t.executed_at < p_to))
$$;

SELECT has_function('undolog', 'prune_month_rows',
                    ARRAY['timestamp with time zone', 'timestamp with time zone'],
                    'undolog.prune_month_rows(timestamptz, timestamptz) exists');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r
      WHERE r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND has_function_privilege(r.oid, 'undolog.prune_month_rows(timestamptz, timestamptz)', 'EXECUTE')$$,
    'internal: no group role may call it');

-- One session, effects on both sides of each bound of June 1996.
SELECT FROM (SELECT pg_temp.add_session() AS s) AS x,
     LATERAL (VALUES ('1996-05-31 23:59:59.999999+00'::timestamptz, 'irreversible'),
                     ('1996-06-01 00:00:00+00', 'irreversible'),
                     ('1996-06-15 00:00:00+00', 'compensable'),
                     ('1996-06-30 23:59:59.999999+00', 'compensable'),
                     ('1996-07-01 00:00:00+00', 'compensable')) AS v (at, tier),
     LATERAL pg_temp.add_effect(x.s, v.at, v.tier) AS e;
CREATE TEMP TABLE effects_before AS SELECT * FROM undolog.undolog_effect_log;
SELECT is(pg_temp.plain_rows('1996-06-01+00', '1996-07-01+00'), 'registry=3 undo=3 approvals=1',
          'setup: June 1996 has 3 registry, 3 undo and 1 approval rows');

SELECT is(undolog.prune_month_rows('1996-06-01+00', '1996-07-01+00'), 7::bigint,
          'pruning June answers 7 rows deleted');
SELECT is(pg_temp.plain_rows('1996-06-01+00', '1996-07-01+00'), 'registry=0 undo=0 approvals=0',
          'June has no registry, undo or approval row left');
SELECT is(pg_temp.plain_rows('1996-05-01+00', '1996-06-01+00'), 'registry=1 undo=1 approvals=1',
          'May''s last microsecond is untouched');
SELECT is(pg_temp.plain_rows('1996-07-01+00', '1996-08-01+00'), 'registry=1 undo=1 approvals=0',
          'July''s first instant is untouched');
SELECT set_eq($$SELECT * FROM undolog.undolog_effect_log$$, $$SELECT * FROM effects_before$$,
              'the effects themselves are untouched (their partitions go by DDL)');
SELECT throws_ok($$DELETE FROM undolog.undolog_signature_registry$$, 'UL011', NULL,
                 'afterwards the registry refuses DELETE again');

SELECT * FROM finish();
ROLLBACK;
