-- Several irreversible calls asked at once: a session that waits for a person takes a new
-- IRREVERSIBLE call (it only asks, with its own request) but still refuses a new acting
-- (COMPENSABLE) one. The session waits until every request is decided: approvals, and
-- refusals of tools registered on_reject 'continue', send it back to active only then; a
-- refusal that ends the session closes the other pending requests with it.
-- Logins are played with SET SESSION AUTHORIZATION (ownership is session_user), the
-- approver and operator with SET ROLE.
BEGIN;
SELECT plan(34);

\ir _helpers.psql

CREATE ROLE ul_t_ask_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_ask_other NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_ask_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_ask_operator NOLOGIN IN ROLE undolog_operator;

-- One call of the session as its agent makes it: 'action approval_id'.
CREATE FUNCTION pg_temp.ask(p_session uuid, p_step integer, p_tool text, p_tier text)
RETURNS text LANGUAGE sql AS $$
    SELECT i.action || coalesce(' ' || i.approval_id::text, '')
    FROM undolog.intercept(p_session, p_step, p_tool, p_tier, jsonb_build_object('n', p_step),
                           pg_temp.sig(p_session::text || p_step || p_tool),
                           CASE p_tier WHEN 'compensable' THEN '{"name": "undo_it"}'::jsonb END) AS i
$$;
GRANT EXECUTE ON FUNCTION pg_temp.ask(uuid, integer, text, text) TO PUBLIC;
CREATE FUNCTION pg_temp.approval(p_session uuid, p_step integer)
RETURNS uuid LANGUAGE sql SECURITY DEFINER AS $$
    SELECT a.approval_id FROM undolog.undolog_approval_requests AS a
    JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
    WHERE a.session_id = p_session AND e.step_index = p_step
$$;
GRANT EXECUTE ON FUNCTION pg_temp.approval(uuid, integer) TO PUBLIC;

SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT pg_temp.tool('wire', 'irreversible');
SELECT pg_temp.tool('mail', 'irreversible');
SELECT pg_temp.tool('make_user', 'compensable', '{"name": "undo_it"}');
SELECT undolog.register_tool('notify', 'irreversible', NULL, NULL, 'continue');
SELECT undolog.register_tool('post', 'irreversible', NULL, NULL, 'continue');

-- ---------------------------------------------------------------------------------------
-- Two calls of one turn, both asked; approving both lets each run once.
-- ---------------------------------------------------------------------------------------
SELECT undolog.begin_session('a5c00000-0000-4000-8000-00000000000a');
SELECT is(split_part(pg_temp.ask('a5c00000-0000-4000-8000-00000000000a', 0, 'wire',
                                 'irreversible'), ' ', 1),
          'await_approval', 'the first irreversible call asks');
SELECT is(pg_temp.ask('a5c00000-0000-4000-8000-00000000000a', 1, 'mail', 'irreversible'),
          'await_approval ' || pg_temp.approval('a5c00000-0000-4000-8000-00000000000a', 1),
          'a second irreversible call in the waiting session asks too, with its own request');
SELECT isnt(pg_temp.approval('a5c00000-0000-4000-8000-00000000000a', 1),
            pg_temp.approval('a5c00000-0000-4000-8000-00000000000a', 0),
            '... which is not the first one''s');
SELECT is(pg_temp.session_state('a5c00000-0000-4000-8000-00000000000a'), 'awaiting_approval',
          'the session stays awaiting_approval');
RESET SESSION AUTHORIZATION;
SELECT pg_temp.journal_state() AS before \gset
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT throws_ok(
    $$SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000a', 2, 'make_user',
                         'compensable')$$,
    'UL010', NULL, 'a new compensable call while a person is asked: UL010');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.journal_state(), :'before', '... and nothing written');
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT is(pg_temp.ask('a5c00000-0000-4000-8000-00000000000a', 1, 'mail', 'irreversible'),
          'await_approval ' || pg_temp.approval('a5c00000-0000-4000-8000-00000000000a', 1),
          'the second call made again finds its own request');
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, 'me')$$,
           pg_temp.approval('a5c00000-0000-4000-8000-00000000000a', 1)),
    '42501', NULL, 'the agent cannot approve its own second call either');
RESET SESSION AUTHORIZATION;
SELECT results_eq(
    $$SELECT tool_name, session_state FROM undolog.pending_approvals
      WHERE session_id = 'a5c00000-0000-4000-8000-00000000000a' ORDER BY step_index$$,
    $$VALUES ('wire'::text, 'awaiting_approval'::text), ('mail', 'awaiting_approval')$$,
    'both requests are pending in pending_approvals, at once');
SELECT results_eq(
    $$SELECT from_state, to_state FROM undolog.undolog_session_history
      WHERE session_id = 'a5c00000-0000-4000-8000-00000000000a' ORDER BY history_id$$,
    $$VALUES (NULL::text, 'active'::text), ('active', 'awaiting_approval')$$,
    'one move to awaiting_approval, not one per call');

SET ROLE ul_t_ask_approver;
SELECT is(undolog.approve(pg_temp.approval('a5c00000-0000-4000-8000-00000000000a', 0), 'ann'),
          'approved', 'the first approved');
RESET ROLE;
SELECT is(pg_temp.session_state('a5c00000-0000-4000-8000-00000000000a'), 'awaiting_approval',
          'the other still pending: the session keeps waiting');
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT is(pg_temp.ask('a5c00000-0000-4000-8000-00000000000a', 0, 'wire', 'irreversible'),
          'await_approval ' || pg_temp.approval('a5c00000-0000-4000-8000-00000000000a', 1),
          'the approved call made now does not run: it waits for the other request');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_ask_approver;
SELECT is(undolog.approve(pg_temp.approval('a5c00000-0000-4000-8000-00000000000a', 1), 'ann'),
          'approved', 'the second approved');
RESET ROLE;
SELECT is(pg_temp.session_state('a5c00000-0000-4000-8000-00000000000a'), 'active',
          'both decided: the session is active');
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT is(pg_temp.ask('a5c00000-0000-4000-8000-00000000000a', 0, 'wire', 'irreversible'),
          'execute', 'the first approved call runs');
SELECT is(pg_temp.ask('a5c00000-0000-4000-8000-00000000000a', 1, 'mail', 'irreversible'),
          'execute', 'the second approved call runs');
SELECT is(pg_temp.ask('a5c00000-0000-4000-8000-00000000000a', 1, 'mail', 'irreversible'),
          'in_progress', 'and only once');
RESET SESSION AUTHORIZATION;

-- Another agent's login cannot add a call to the waiting session.
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT undolog.begin_session('a5c00000-0000-4000-8000-00000000000b');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000b', 0, 'wire', 'irreversible');
SET SESSION AUTHORIZATION ul_t_ask_other;
SELECT pg_temp.tool('mail', 'irreversible');
SELECT throws_ok(
    $$SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000b', 1, 'mail', 'irreversible')$$,
    '42501', NULL, 'another login cannot ask in a session it does not own');
RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------------------
-- A refusal that ends the session closes the other request with it.
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT undolog.begin_session('a5c00000-0000-4000-8000-00000000000c');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000c', 0, 'make_user', 'compensable');
SELECT undolog.commit(e.effect_id, '{}') FROM undolog.undolog_effect_log AS e
WHERE e.session_id = 'a5c00000-0000-4000-8000-00000000000c';
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000c', 1, 'wire', 'irreversible');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000c', 2, 'mail', 'irreversible');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_ask_approver;
SELECT is(undolog.reject(pg_temp.approval('a5c00000-0000-4000-8000-00000000000c', 1), 'ann',
                         'too much'),
          'rejected', 'one of two rejected (wire: on_reject fail_session)');
RESET ROLE;
SELECT is(pg_temp.session_state('a5c00000-0000-4000-8000-00000000000c'), 'compensating',
          'the session goes to its undo walk, though the other was pending');
SELECT results_eq(
    $$SELECT a.state, a.decided_by, e.state FROM undolog.undolog_approval_requests AS a
      JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
      WHERE a.session_id = 'a5c00000-0000-4000-8000-00000000000c' ORDER BY e.step_index$$,
    $$VALUES ('rejected'::text, 'ann'::text, 'rejected'::text), ('rejected', 'ann', 'rejected')$$,
    'the other request is closed too, by the same decider, and its call is rejected');
SELECT is((SELECT count(*)::integer FROM undolog.pending_approvals
           WHERE session_id = 'a5c00000-0000-4000-8000-00000000000c'), 0,
          'nothing of the ended session is left for a person to decide');
SELECT is(undolog.session_refusal('a5c00000-0000-4000-8000-00000000000c'),
          pg_temp.approval('a5c00000-0000-4000-8000-00000000000c', 1),
          'the refusal that ended the session is the person''s, not the closed one');
SET ROLE ul_t_ask_operator;
SELECT undolog.claim_compensation('a5c00000-0000-4000-8000-00000000000c');
RESET ROLE;
SELECT results_eq(
    $$SELECT u.state FROM undolog.undolog_undo_stack AS u
      WHERE u.session_id = 'a5c00000-0000-4000-8000-00000000000c' ORDER BY u.stack_position$$,
    $$VALUES ('compensating'::text), ('skipped'), ('skipped')$$,
    'the walk skips both barriers (neither call ran) and claims the compensable call');
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT is(pg_temp.ask('a5c00000-0000-4000-8000-00000000000c', 2, 'mail', 'irreversible'),
          'rejected ' || pg_temp.approval('a5c00000-0000-4000-8000-00000000000c', 2),
          'the closed call made again is answered rejected, with its own request');
RESET SESSION AUTHORIZATION;

-- An expiry that ends the session closes the other as expired, by nobody.
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT undolog.begin_session('a5c00000-0000-4000-8000-00000000000d');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000d', 0, 'wire', 'irreversible');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000d', 1, 'mail', 'irreversible');
RESET SESSION AUTHORIZATION;
-- The clock moves on (the request's guard briefly off, as in 51_expiry.sql).
ALTER TABLE undolog.undolog_approval_requests DISABLE TRIGGER undolog_approval_requests_guard;
UPDATE undolog.undolog_approval_requests
SET requested_at = now() - interval '2 hours', expires_at = now() - interval '1 hour'
WHERE approval_id = pg_temp.approval('a5c00000-0000-4000-8000-00000000000d', 0);
ALTER TABLE undolog.undolog_approval_requests ENABLE TRIGGER undolog_approval_requests_guard;
SET ROLE ul_t_ask_operator;
SELECT results_eq(
    $$SELECT * FROM undolog.expire_approvals()$$,
    format($$VALUES (%L::uuid)$$, pg_temp.approval('a5c00000-0000-4000-8000-00000000000d', 0)),
    'the sweep expires the one past its deadline');
RESET ROLE;
SELECT results_eq(
    $$SELECT a.state, a.decided_by FROM undolog.undolog_approval_requests AS a
      WHERE a.session_id = 'a5c00000-0000-4000-8000-00000000000d' ORDER BY a.requested_at$$,
    $$VALUES ('expired'::text, NULL::text), ('expired', NULL)$$,
    'the other is closed as expired with it, by nobody');

-- ---------------------------------------------------------------------------------------
-- on_reject 'continue': the session goes on once both are decided.
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT undolog.begin_session('a5c00000-0000-4000-8000-00000000000e');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000e', 0, 'notify', 'irreversible');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000e', 1, 'post', 'irreversible');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_ask_approver;
SELECT undolog.reject(pg_temp.approval('a5c00000-0000-4000-8000-00000000000e', 0), 'ann', 'no');
RESET ROLE;
SELECT is(pg_temp.session_state('a5c00000-0000-4000-8000-00000000000e'), 'awaiting_approval',
          'a continue refusal with the other pending: the session keeps waiting');
SET ROLE ul_t_ask_approver;
SELECT undolog.reject(pg_temp.approval('a5c00000-0000-4000-8000-00000000000e', 1), 'ann', 'no');
RESET ROLE;
SELECT is(pg_temp.session_state('a5c00000-0000-4000-8000-00000000000e'), 'active',
          'both refused, both continue: the session is active');
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT is(split_part(pg_temp.ask('a5c00000-0000-4000-8000-00000000000e', 1, 'post',
                                 'irreversible'), ' ', 1),
          'rejected', 'the refused call made again is answered rejected');
RESET SESSION AUTHORIZATION;

-- A continue refusal and an approval: active once both are decided, the approved one runs.
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT undolog.begin_session('a5c00000-0000-4000-8000-00000000000f');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000f', 0, 'notify', 'irreversible');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-00000000000f', 1, 'wire', 'irreversible');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_ask_approver;
SELECT undolog.reject(pg_temp.approval('a5c00000-0000-4000-8000-00000000000f', 0), 'ann', 'no');
SELECT undolog.approve(pg_temp.approval('a5c00000-0000-4000-8000-00000000000f', 1), 'ann');
RESET ROLE;
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT is(pg_temp.ask('a5c00000-0000-4000-8000-00000000000f', 1, 'wire', 'irreversible'),
          'execute', 'a continue refusal and an approval: the approved call runs');
RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------------------
-- An operator's rollback of a session with two pending requests.
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_ask_agent;
SELECT undolog.begin_session('a5c00000-0000-4000-8000-000000000010');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-000000000010', 0, 'wire', 'irreversible');
SELECT pg_temp.ask('a5c00000-0000-4000-8000-000000000010', 1, 'mail', 'irreversible');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_ask_operator;
SELECT is(undolog.rollback_session('a5c00000-0000-4000-8000-000000000010', 'olga', 'stop'),
          'compensating', 'a rollback with two pending requests sends the session to its walk');
RESET ROLE;
SELECT results_eq(
    $$SELECT state, decided_by, reason LIKE 'rolled back by olga: stop'
      FROM undolog.undolog_approval_requests
      WHERE session_id = 'a5c00000-0000-4000-8000-000000000010'
      ORDER BY requested_at, approval_id$$,
    $$VALUES ('rejected'::text, 'olga'::text, true), ('rejected', 'olga', false)$$,
    'both requests are rejected by the operator: the first with the reason, the other closed');

SELECT * FROM finish();
ROLLBACK;
