-- on_reject, a tool registration's answer to "what does a human's refusal of its call do
-- to the session": 'fail_session' (the rule: the undo walk runs) or 'continue' (the
-- refusal is recorded and the session goes on). approval_decision tells the agent who
-- refused, when and why; a session run again after a refusal that ended it is answered
-- 'rejected' by every call, also those the walk has already undone.
-- Logins are played with SET SESSION AUTHORIZATION (ownership is session_user), the
-- approver and operator with SET ROLE.
BEGIN;
SELECT plan(35);

\ir _helpers.psql

CREATE ROLE ul_t_rej_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_rej_other NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_rej_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_rej_operator NOLOGIN IN ROLE undolog_operator;
CREATE ROLE ul_t_rej_nobody NOLOGIN;

-- ---------------------------------------------------------------------------------------
-- Registration
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT undolog.register_tool('send_email', 'irreversible', NULL, NULL, 'continue')
    AS tool_email \gset
SELECT is(undolog.register_tool('send_email', 'irreversible', p_on_reject => 'continue'),
          :'tool_email'::uuid, 'the same definition, on_reject included, answers the same tool');
SELECT throws_ok(
    $$SELECT undolog.register_tool('send_email', 'irreversible')$$,
    'UL018', NULL, 'on_reject is part of the definition: the default differs from continue');
SELECT throws_like(
    $$SELECT undolog.register_tool('wire', 'irreversible', p_on_reject => 'maybe')$$,
    '%on_reject must be ''fail_session'' or ''continue''%',
    'a bad on_reject names the allowed values');
SELECT throws_ok(
    $$SELECT undolog.register_tool('wire', 'irreversible', p_on_reject => 'maybe')$$,
    'UL008', NULL, 'a bad on_reject is UL008');
SELECT throws_ok(
    $$SELECT undolog.register_tool('wire', 'irreversible', p_on_reject => NULL)$$,
    'UL008', NULL, 'on_reject NULL is UL008');
SELECT throws_ok(
    $$SELECT undolog.register_tool('create_user', 'compensable', '{"name": "delete_user"}',
                                   p_on_reject => 'continue')$$,
    'UL008', NULL, 'continue is for an irreversible tool only');
SELECT undolog.register_tool('wire', 'irreversible') AS tool_wire \gset
SELECT undolog.register_tool('create_user', 'compensable', '{"name": "delete_user"}')
    AS tool_user \gset
SELECT results_eq(
    $$SELECT tool_name, on_reject FROM undolog.registered_tools ORDER BY tool_name$$,
    $$VALUES ('create_user', 'fail_session'), ('send_email', 'continue'),
             ('wire', 'fail_session')$$,
    'registered_tools shows each registration''s on_reject; the default is fail_session');
RESET SESSION AUTHORIZATION;
SELECT throws_ok(
    $$INSERT INTO undolog.undolog_tools (owner_role, tool_name, tier, on_reject)
      VALUES ('ul_t_rej_agent', 'x', 'irreversible', 'ignore')$$,
    '23514', NULL, 'the table itself refuses another on_reject (CHECK)');
SELECT is(
    (SELECT count(*)::integer FROM pg_catalog.pg_proc
     WHERE proname = 'register_tool' AND pronamespace = 'undolog'::regnamespace),
    1, 'exactly one register_tool');

-- ---------------------------------------------------------------------------------------
-- A rejection of a 'continue' tool keeps the session going
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT undolog.begin_session('c0000000-0000-4000-8000-000000000001', 'mailer');
SELECT approval_id AS approval_c, effect_id AS effect_c FROM undolog.intercept(
    'c0000000-0000-4000-8000-000000000001', 0, 'send_email', 'irreversible',
    '{"to": "all@example.com"}', pg_temp.sig('c-0')) \gset
RESET SESSION AUTHORIZATION;
-- The person took longer than the lease: going on must hand the session a fresh one.
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 hour'
WHERE session_id = 'c0000000-0000-4000-8000-000000000001';

SET ROLE ul_t_rej_approver;
SELECT is(undolog.reject(:'approval_c', 'bob@example.com', 'not to the whole company'),
          'rejected', 'reject answers rejected');
RESET ROLE;

SELECT results_eq(
    $$SELECT state, lease_expires_at > now() FROM undolog.undolog_sessions
      WHERE session_id = 'c0000000-0000-4000-8000-000000000001'$$,
    $$VALUES ('active'::text, true)$$,
    'the session goes awaiting_approval -> active, with a fresh lease');
SELECT is((SELECT state FROM undolog.undolog_effect_log WHERE effect_id = :'effect_c'),
          'rejected', 'the effect is rejected (terminal), as for any tool');
SELECT is(
    (SELECT detail FROM undolog.undolog_session_history
     WHERE session_id = 'c0000000-0000-4000-8000-000000000001'
     ORDER BY history_id DESC LIMIT 1),
    jsonb_build_object('refused', jsonb_build_array(jsonb_build_object(
        'approval_id', :'approval_c'::uuid, 'effect_id', :'effect_c'::uuid,
        'decision', 'rejected', 'decided_by', 'bob@example.com',
        'reason', 'not to the whole company'))),
    'the session history''s move back to active names the refusal, who and why');
SELECT is(
    (SELECT count(*)::integer FROM undolog.undolog_session_history
     WHERE session_id = 'c0000000-0000-4000-8000-000000000001' AND to_state = 'compensating'),
    0, 'no undo walk is started');

SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT results_eq(
    $$SELECT action, state, approval_id FROM undolog.intercept(
        'c0000000-0000-4000-8000-000000000001', 0, 'send_email', 'irreversible',
        '{"to": "all@example.com"}', pg_temp.sig('c-0'))$$,
    $$VALUES ('rejected'::text, 'rejected'::text, '$$ || :'approval_c' || $$'::uuid)$$,
    'the rejected call made again is answered rejected');
SELECT results_eq(
    $$SELECT decision, decided_by, decided_at IS NOT NULL, reason, tool_name, on_reject,
             session_state, session_continues, effect_id
      FROM undolog.approval_decision('$$ || :'approval_c' || $$')$$,
    $$VALUES ('rejected'::text, 'bob@example.com'::text, true,
              'not to the whole company'::text, 'send_email'::text, 'continue'::text,
              'active'::text, true, '$$ || :'effect_c' || $$'::uuid)$$,
    'approval_decision tells the agent who rejected, when, why, and that the session goes on');
SELECT is(
    (SELECT action FROM undolog.intercept(
        'c0000000-0000-4000-8000-000000000001', 1, 'send_email', 'irreversible',
        '{"to": "team@example.com"}', pg_temp.sig('c-1'))),
    'await_approval', 'the session takes new calls: another irreversible call is asked for');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_rej_other;
SELECT is(
    (SELECT count(*)::integer FROM undolog.approval_decision(:'approval_c')),
    0, 'another agent login sees nothing of the decision (row-level security)');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_rej_nobody;
SELECT throws_ok(
    format('SELECT * FROM undolog.approval_decision(%L)', :'approval_c'),
    '42501', NULL, 'a login with none of the engine''s roles may not call approval_decision');
RESET ROLE;
SET ROLE ul_t_rej_approver;
SELECT is(
    (SELECT reason FROM undolog.approval_decision(:'approval_c')),
    'not to the whole company', 'an approver reads any decision');
SELECT throws_ok(
    format('SELECT undolog.session_refusal(%L)', 'c0000000-0000-4000-8000-000000000001'),
    '42501', NULL, 'session_refusal is the engine''s own (intercept), not for its roles');
RESET ROLE;

-- ---------------------------------------------------------------------------------------
-- An expiry of a 'continue' tool's request keeps the session going too
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT undolog.begin_session('c0000000-0000-4000-8000-000000000002', 'mailer');
SELECT approval_id AS approval_x FROM undolog.intercept(
    'c0000000-0000-4000-8000-000000000002', 0, 'send_email', 'irreversible',
    '{"to": "x@example.com"}', pg_temp.sig('x-0')) \gset
RESET SESSION AUTHORIZATION;
-- The clock moves on (the request's guard briefly off, as in 51_expiry).
ALTER TABLE undolog.undolog_approval_requests DISABLE TRIGGER undolog_approval_requests_guard;
UPDATE undolog.undolog_approval_requests
SET requested_at = now() - interval '2 hours', expires_at = now() - interval '1 hour'
WHERE approval_id = :'approval_x';
ALTER TABLE undolog.undolog_approval_requests ENABLE TRIGGER undolog_approval_requests_guard;
SET ROLE ul_t_rej_operator;
SELECT is((SELECT count(*)::integer FROM undolog.expire_approvals() AS x
           WHERE x = :'approval_x'), 1, 'expire_approvals expires the request');
RESET ROLE;
SELECT is((SELECT state FROM undolog.undolog_sessions
           WHERE session_id = 'c0000000-0000-4000-8000-000000000002'),
          'active', 'the expiry of a continue tool''s request leaves the session active');
SELECT results_eq(
    $$SELECT decision, decided_by, session_continues
      FROM undolog.approval_decision('$$ || :'approval_x' || $$')$$,
    $$VALUES ('expired'::text, NULL::text, true)$$,
    'approval_decision: expired by the engine, the session goes on');

-- ---------------------------------------------------------------------------------------
-- The default: a rejection ends the session; a run made again is answered 'rejected'
-- also by the calls the walk already undid
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT undolog.begin_session('d0000000-0000-4000-8000-000000000001', 'payer');
SELECT effect_id AS effect_user FROM undolog.intercept(
    'd0000000-0000-4000-8000-000000000001', 0, 'create_user', 'compensable',
    '{"email": "a@example.com"}', pg_temp.sig('d-0'), '{"name": "delete_user"}') \gset
SELECT undolog.commit(:'effect_user', '{"id": 1}');
SELECT approval_id AS approval_d FROM undolog.intercept(
    'd0000000-0000-4000-8000-000000000001', 1, 'wire', 'irreversible',
    '{"amount": 100}', pg_temp.sig('d-1')) \gset
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_rej_approver;
SELECT undolog.reject(:'approval_d', 'carol@example.com', 'wrong account');
RESET ROLE;
SELECT is((SELECT state FROM undolog.undolog_sessions
           WHERE session_id = 'd0000000-0000-4000-8000-000000000001'),
          'compensating', 'a default tool''s rejection sends the session to its undo walk');

SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT results_eq(
    $$SELECT decision, decided_by, reason, on_reject, session_continues
      FROM undolog.approval_decision('$$ || :'approval_d' || $$')$$,
    $$VALUES ('rejected'::text, 'carol@example.com'::text, 'wrong account'::text,
              'fail_session'::text, false)$$,
    'approval_decision: the session does not go on');
SELECT results_eq(
    $$SELECT action, state, approval_id FROM undolog.intercept(
        'd0000000-0000-4000-8000-000000000001', 0, 'create_user', 'compensable',
        '{"email": "a@example.com"}', pg_temp.sig('d-0'), '{"name": "delete_user"}')$$,
    $$VALUES ('replay'::text, 'committed'::text, NULL::uuid)$$,
    'before the walk reaches it, the earlier call replays');
RESET SESSION AUTHORIZATION;

-- The walk: the barrier of the rejected call is skipped, the user is deleted.
SET ROLE ul_t_rej_operator;
SELECT undo_id AS undo_user FROM undolog.claim_compensation(
    'd0000000-0000-4000-8000-000000000001') \gset
SELECT undolog.complete_compensation(:'undo_user');
SELECT is((SELECT count(*)::integer FROM undolog.claim_compensation(
               'd0000000-0000-4000-8000-000000000001')),
          0, 'the walk ends');
RESET ROLE;
SELECT results_eq(
    $$SELECT s.state, e.state FROM undolog.undolog_sessions AS s
      JOIN undolog.undolog_effect_log AS e ON e.session_id = s.session_id
      WHERE s.session_id = 'd0000000-0000-4000-8000-000000000001' AND e.step_index = 0$$,
    $$VALUES ('compensated'::text, 'compensated'::text)$$,
    'the session and its earlier call are compensated');

SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT results_eq(
    $$SELECT effect_id, action, state, approval_id FROM undolog.intercept(
        'd0000000-0000-4000-8000-000000000001', 0, 'create_user', 'compensable',
        '{"email": "a@example.com"}', pg_temp.sig('d-0'), '{"name": "delete_user"}')$$,
    $$VALUES ('$$ || :'effect_user' || $$'::uuid, 'rejected'::text, 'compensated'::text,
              '$$ || :'approval_d' || $$'::uuid)$$,
    'a compensated call of a session a rejection ended is answered rejected, with the '
    'refused call''s approval');
SELECT results_eq(
    $$SELECT action, approval_id FROM undolog.intercept(
        'd0000000-0000-4000-8000-000000000001', 1, 'wire', 'irreversible',
        '{"amount": 100}', pg_temp.sig('d-1'))$$,
    $$VALUES ('rejected'::text, '$$ || :'approval_d' || $$'::uuid)$$,
    'and the rejected call itself as before');
RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------------------
-- Undone for another reason: still UL001
-- ---------------------------------------------------------------------------------------
-- A compensable call committed, the session failed by its agent, and the walk run.
CREATE FUNCTION pg_temp.agent_fails(p_session uuid, p_seed text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_effect uuid;
BEGIN
    SELECT i.effect_id INTO v_effect FROM undolog.intercept(
        p_session, 9, 'create_user', 'compensable', '{"email": "b@example.com"}',
        pg_temp.sig(p_seed), '{"name": "delete_user"}') AS i;
    PERFORM undolog.commit(v_effect, '{"id": 2}');
    PERFORM undolog.fail_session(p_session, 'the agent raised');
END
$$;
CREATE FUNCTION pg_temp.walk_all(p_session uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_undo uuid;
BEGIN
    LOOP
        SELECT c.undo_id INTO v_undo FROM undolog.claim_compensation(p_session) AS c;
        EXIT WHEN NOT FOUND;
        PERFORM undolog.complete_compensation(v_undo);
    END LOOP;
END
$$;
GRANT EXECUTE ON FUNCTION pg_temp.agent_fails(uuid, text), pg_temp.walk_all(uuid) TO PUBLIC;

SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT undolog.begin_session('e0000000-0000-4000-8000-000000000001', 'plain');
SELECT pg_temp.agent_fails('e0000000-0000-4000-8000-000000000001', 'e-9');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_rej_operator;
SELECT pg_temp.walk_all('e0000000-0000-4000-8000-000000000001');
RESET ROLE;
SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('e0000000-0000-4000-8000-000000000001', 9,
        'create_user', 'compensable', '{"email": "b@example.com"}', pg_temp.sig('e-9'),
        '{"name": "delete_user"}')$$,
    'UL001', NULL, 'a session failed by its agent, not a refusal: an undone call is UL001');

-- A 'continue' tool's refusal earlier in the session did not end it: the same.
SELECT pg_temp.agent_fails('c0000000-0000-4000-8000-000000000002', 'x-9');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_rej_operator;
SELECT pg_temp.walk_all('c0000000-0000-4000-8000-000000000002');
RESET ROLE;
SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('c0000000-0000-4000-8000-000000000002', 9,
        'create_user', 'compensable', '{"email": "b@example.com"}', pg_temp.sig('x-9'),
        '{"name": "delete_user"}')$$,
    'UL001', NULL, 'a continue tool''s refusal is not what ended the session: UL001');
RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------------------
-- A person's rollback of a session waiting on a 'continue' tool still undoes it
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_rej_agent;
SELECT undolog.begin_session('f0000000-0000-4000-8000-000000000001', 'mailer');
SELECT approval_id AS approval_f FROM undolog.intercept(
    'f0000000-0000-4000-8000-000000000001', 0, 'send_email', 'irreversible',
    '{"to": "f@example.com"}', pg_temp.sig('f-0')) \gset
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_rej_operator;
SELECT is(undolog.rollback_session('f0000000-0000-4000-8000-000000000001', 'dana',
                                   'stop this campaign'),
          'failed', 'rollback_session: the rejection does not keep the session going');
RESET ROLE;
SELECT is((SELECT state FROM undolog.undolog_approval_requests
           WHERE approval_id = :'approval_f'), 'rejected', 'its pending request is rejected');

SELECT * FROM finish();
ROLLBACK;
