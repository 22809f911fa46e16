-- The saga's schema: the undo stack's guard trigger and state machine, the append-only
-- undo history and operator actions, the operator-only effect transition, internal helpers.
BEGIN;
SELECT plan(27);

-- Helpers for the saga suites (pg_temp: gone with the ROLLBACK). Approvals are simulated
-- with the owner's direct UPDATEs, which the guard triggers still validate.
CREATE FUNCTION pg_temp.sig(p_seed text) RETURNS text LANGUAGE sql IMMUTABLE
AS $$ SELECT encode(sha256(convert_to(p_seed, 'UTF8')), 'hex') $$;

-- Everything the engine writes, as one text: equal before and after = nothing written.
CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql
AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.session_id) FROM undolog.undolog_sessions AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.history_id) FROM undolog.undolog_session_history AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.effect_id) FROM undolog.undolog_effect_log AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.history_id) FROM undolog.undolog_effect_history AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.stack_position) FROM undolog.undolog_undo_stack AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.history_id) FROM undolog.undolog_undo_history AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.action_id) FROM undolog.undolog_operator_actions AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.approval_id) FROM undolog.undolog_approval_requests AS t)
    ))
$$;

-- Two tests: p_sql raises p_errcode, and it wrote nothing.
CREATE FUNCTION pg_temp.refused(p_sql text, p_errcode text, p_description text)
RETURNS SETOF text LANGUAGE plpgsql
AS $$
DECLARE
    v_before text := pg_temp.fingerprint();
BEGIN
    RETURN NEXT throws_ok(p_sql, p_errcode::char(5), NULL, p_description);
    RETURN NEXT is(pg_temp.fingerprint(), v_before, p_description || ': nothing written');
END
$$;

CREATE FUNCTION pg_temp.new_session() RETURNS uuid LANGUAGE sql
AS $$ SELECT undolog.begin_session() $$;

-- A COMPENSABLE call at step p_step, left p_outcome: committed, failed (reported: the
-- effect is pending again) or executing (the agent died mid-call). Answers its effect id.
CREATE FUNCTION pg_temp.call(
    p_session uuid, p_step integer, p_outcome text DEFAULT 'committed',
    p_compensation jsonb DEFAULT '{"name": "undo_step"}'
) RETURNS uuid LANGUAGE plpgsql
AS $$
DECLARE
    v_effect uuid;
BEGIN
    SELECT i.effect_id INTO v_effect
    FROM undolog.intercept(p_session, p_step, 'step_' || p_step, 'compensable',
                           jsonb_build_object('step', p_step),
                           pg_temp.sig(p_session || '/' || p_step), p_compensation) AS i;
    IF p_outcome = 'committed' THEN
        PERFORM undolog.commit(v_effect, jsonb_build_object('id', p_step));
    ELSIF p_outcome = 'failed' THEN
        PERFORM undolog.fail(v_effect, 'boom');
    END IF;
    RETURN v_effect;
END
$$;

-- An IRREVERSIBLE call at step p_step, left p_outcome:
--   pending   awaiting a decision (session awaiting_approval)
--   rejected  a human rejected it (session awaiting_approval -> compensating)
--   approved  approved, not yet made again (session active)
--   executing approved and running (session active)
--   committed approved, run, committed (session active)
CREATE FUNCTION pg_temp.irreversible(p_session uuid, p_step integer, p_outcome text)
RETURNS uuid LANGUAGE plpgsql
AS $$
DECLARE
    v_effect uuid;
BEGIN
    SELECT i.effect_id INTO v_effect
    FROM undolog.intercept(p_session, p_step, 'irreversible_' || p_step, 'irreversible',
                           jsonb_build_object('step', p_step),
                           pg_temp.sig(p_session || '/' || p_step)) AS i;
    IF p_outcome = 'pending' THEN
        RETURN v_effect;
    END IF;
    UPDATE undolog.undolog_approval_requests AS a
    SET state = CASE p_outcome WHEN 'rejected' THEN 'rejected' ELSE 'approved' END,
        decided_at = now(), decided_by = 'pgtap'
    WHERE a.effect_id = v_effect;
    UPDATE undolog.undolog_effect_log AS e
    SET state = CASE p_outcome WHEN 'rejected' THEN 'rejected' ELSE 'approved' END
    WHERE e.effect_id = v_effect;
    UPDATE undolog.undolog_sessions AS s
    SET state = CASE p_outcome WHEN 'rejected' THEN 'compensating' ELSE 'active' END
    WHERE s.session_id = p_session;
    IF p_outcome IN ('executing', 'committed') THEN
        PERFORM undolog.intercept(p_session, p_step, 'irreversible_' || p_step, 'irreversible',
                                  jsonb_build_object('step', p_step),
                                  pg_temp.sig(p_session || '/' || p_step));
    END IF;
    IF p_outcome = 'committed' THEN
        PERFORM undolog.commit(v_effect, '{"done": true}');
    END IF;
    RETURN v_effect;
END
$$;

CREATE FUNCTION pg_temp.undo_of(p_effect uuid) RETURNS uuid LANGUAGE sql
AS $$ SELECT u.undo_id FROM undolog.undolog_undo_stack AS u WHERE u.effect_id = p_effect $$;

CREATE FUNCTION pg_temp.entry_state(p_effect uuid) RETURNS text LANGUAGE sql
AS $$ SELECT u.state FROM undolog.undolog_undo_stack AS u WHERE u.effect_id = p_effect $$;

CREATE FUNCTION pg_temp.effect_state(p_effect uuid) RETURNS text LANGUAGE sql
AS $$ SELECT e.state FROM undolog.undolog_effect_log AS e WHERE e.effect_id = p_effect $$;

CREATE FUNCTION pg_temp.session_state(p_session uuid) RETURNS text LANGUAGE sql
AS $$ SELECT s.state FROM undolog.undolog_sessions AS s WHERE s.session_id = p_session $$;

-- Claim and answer the claimed effect's step (NULL: no row).
CREATE FUNCTION pg_temp.claim_step(p_session uuid) RETURNS integer LANGUAGE sql
AS $$ SELECT (c.args ->> 'step')::integer FROM undolog.claim_compensation(p_session) AS c $$;

-- The whole walk, each claim completed at once: the steps in the order they were undone.
CREATE FUNCTION pg_temp.walk(p_session uuid) RETURNS integer[] LANGUAGE plpgsql
AS $$
DECLARE
    v_claim record;
    v_steps integer[] := '{}';
BEGIN
    LOOP
        SELECT c.* INTO v_claim FROM undolog.claim_compensation(p_session) AS c;
        EXIT WHEN NOT FOUND;
        PERFORM undolog.complete_compensation(v_claim.undo_id);
        v_steps := v_steps || (v_claim.args ->> 'step')::integer;
    END LOOP;
    RETURN v_steps;
END
$$;

-- The entry state machine, as data.
SELECT results_eq(
    $$SELECT f.s || ' -> ' || t.s
      FROM (VALUES ('pending'), ('compensating'), ('compensated'), ('compensation_failed'), ('skipped')) AS f (s),
           (VALUES ('pending'), ('compensating'), ('compensated'), ('compensation_failed'), ('skipped')) AS t (s)
      WHERE undolog.undo_transition_allowed(f.s, t.s) ORDER BY 1$$,
    $$VALUES ('compensating -> compensated'), ('compensating -> compensation_failed'),
             ('compensating -> pending'), ('compensation_failed -> pending'),
             ('pending -> compensating'), ('pending -> skipped')$$,
    'the undo entry transitions are exactly these'
);
SELECT ok(undolog.effect_transition_allowed('compensable', 'compensation_failed', 'compensating'),
          'an effect may go compensation_failed -> compensating (operator retry) ...');
SELECT ok(NOT undolog.effect_transition_allowed('irreversible', 'compensation_failed', 'compensating'),
          '... only a COMPENSABLE one');
SELECT ok(NOT undolog.effect_transition_allowed('compensable', 'compensation_failed', 'compensated'),
          '... and nowhere else from compensation_failed');
SELECT ok(NOT undolog.effect_transition_allowed('compensable', 'compensated', 'compensating'),
          'compensated stays final');

SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 1) AS f1 \gset
SELECT pg_temp.call(:'s1', 2) AS f2 \gset
SELECT pg_temp.undo_of(:'f1') AS u1 \gset
SELECT pg_temp.undo_of(:'f2') AS u2 \gset
SELECT undolog.fail_session(:'s1', 'x');

-- The guard, for the owner too.
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET state = 'compensated' WHERE undo_id = %L$$, :'u2'),
                 'UL001', 'invalid undo entry transition pending -> compensated',
                 'an entry cannot skip being in flight');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET compensation = '{"name": "other"}' WHERE undo_id = %L$$, :'u2'),
                 'UL011', NULL, 'the compensation of an entry cannot change');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET effect_id = %L WHERE undo_id = %L$$, :'f1', :'u2'),
                 'UL011', NULL, 'the effect of an entry cannot change');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET max_attempts = 99 WHERE undo_id = %L$$, :'u2'),
                 'UL011', NULL, 'the max_attempts of an entry cannot change');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET state = 'compensating' WHERE undo_id = %L$$, :'u2'),
                 '23514', NULL, 'an entry cannot be in flight without a claim expiry');
SELECT c.attempt FROM undolog.claim_compensation(:'s1') AS c;
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET attempts = 0 WHERE undo_id = %L$$, :'u2'),
                 'UL011', NULL, 'the attempt count never goes down');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET state = 'skipped' WHERE undo_id = %L$$, :'u2'),
                 'UL001', NULL, 'an entry in flight cannot be skipped');
SELECT lives_ok(format($$UPDATE undolog.undolog_undo_stack SET claimed_until = now() WHERE undo_id = %L$$, :'u2'),
                'the claim expiry may change (no history for it)');
SELECT is((SELECT count(*)::int FROM undolog.undolog_undo_history WHERE undo_id = :'u2'), 1,
          'only the claim is in the history');
SELECT undolog.complete_compensation(:'u2');
SELECT ok((SELECT u.updated_at = now() FROM undolog.undolog_undo_stack AS u WHERE u.undo_id = :'u2'),
          'updated_at follows each change');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET state = 'pending' WHERE undo_id = %L$$, :'u2'),
                 'UL001', NULL, 'compensated is final');

-- Append-only tables.
SELECT throws_ok('UPDATE undolog.undolog_undo_history SET detail = NULL', 'UL011', NULL,
                 'the undo history cannot be updated');
SELECT throws_ok('DELETE FROM undolog.undolog_undo_history', 'UL011', NULL,
                 'the undo history cannot be deleted from');
SELECT throws_ok('TRUNCATE undolog.undolog_undo_history', 'UL011', NULL,
                 'the undo history cannot be truncated');
INSERT INTO undolog.undolog_operator_actions (session_id, action, performed_by) VALUES (:'s1', 'resume', 'x');
SELECT throws_ok('UPDATE undolog.undolog_operator_actions SET reason = ''r''', 'UL011', NULL,
                 'operator actions cannot be updated');
SELECT throws_ok('DELETE FROM undolog.undolog_operator_actions', 'UL011', NULL,
                 'operator actions cannot be deleted');
SELECT throws_ok('TRUNCATE undolog.undolog_operator_actions', 'UL011', NULL,
                 'operator actions cannot be truncated');

-- Nobody but the owner touches the new tables; internal helpers have no grant.
SELECT is_empty(
    $$SELECT r.rolname, c.relname, p.privilege_type
      FROM pg_class AS c
      CROSS JOIN LATERAL aclexplode(c.relacl) AS p
      JOIN pg_roles AS r ON r.oid = p.grantee
      WHERE c.oid IN ('undolog.undolog_undo_history'::regclass, 'undolog.undolog_operator_actions'::regclass)
        AND r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND p.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')$$,
    'no group role may write the undo history or the operator actions'
);
SELECT ok(NOT has_table_privilege('public', 'undolog.undolog_undo_history', 'SELECT')
          AND NOT has_table_privilege('public', 'undolog.undolog_operator_actions', 'SELECT'),
          'PUBLIC cannot read them');
SELECT is_empty(
    $$SELECT p.oid::regprocedure, r.rolname
      FROM pg_proc AS p
      CROSS JOIN LATERAL aclexplode(p.proacl) AS a
      JOIN pg_roles AS r ON r.oid = a.grantee
      WHERE p.oid IN ('undolog.lock_undo_entry(uuid)'::regprocedure,
                      'undolog.halt_walk(uuid, uuid, text)'::regprocedure,
                      'undolog.give_up_compensation(undolog.undolog_undo_stack, text)'::regprocedure,
                      'undolog.lock_halted_session(uuid)'::regprocedure,
                      'undolog.setting_interval(text, interval)'::regprocedure,
                      'undolog.setting_integer(text, integer, integer, integer)'::regprocedure,
                      'undolog.retry_delay(integer, interval, interval)'::regprocedure,
                      'undolog.check_operator(text)'::regprocedure,
                      'undolog.undo_transition_allowed(text, text)'::regprocedure)
        AND a.privilege_type = 'EXECUTE' AND r.rolname <> current_user$$,
    'internal helpers are executable by nobody but the owner'
);
SELECT is_empty(
    $$SELECT p.oid::regprocedure
      FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
      WHERE n.nspname = 'undolog' AND p.prosecdef
        AND NOT coalesce(p.proconfig @> ARRAY['search_path=undolog, pg_temp'], false)$$,
    'every SECURITY DEFINER function pins its search_path'
);
SELECT set_eq(
    $$SELECT p.oid::regprocedure::text
      FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
      WHERE n.nspname = 'undolog' AND has_function_privilege('undolog_operator', p.oid, 'EXECUTE')$$,
    $$VALUES ('undolog.ensure_partitions(integer)'), ('undolog.recover()'),
             ('undolog.claim_compensation(uuid,interval)'),
             ('undolog.complete_compensation(uuid,integer)'),
             ('undolog.fail_compensation(uuid,text,integer)'),
             ('undolog.resume_session(uuid,text,text)'),
             ('undolog.retry_compensation(uuid,text,text)'),
             ('undolog.abandon_session(uuid,text,text)')$$,
    'the operator role executes exactly the walk, recovery, the operator functions and partitions'
);

SELECT * FROM finish();
ROLLBACK;
