-- Approval deadlines: the undolog.approval_timeout setting, expire_approvals(), and what
-- approve / reject do once a deadline has passed.
-- now() does not move inside a test transaction, so "the deadline passes" is played by
-- moving a request's expires_at into the past with its guard trigger briefly disabled
-- (the guard otherwise forbids moving a deadline; the ALTER rolls back with the test).
BEGIN;
SELECT plan(46);

CREATE ROLE ul_t_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_operator NOLOGIN IN ROLE undolog_operator;

\ir _helpers.psql

SELECT pg_temp.tool('x', 'irreversible') AS tool_id \gset

-- The deadline comes from the database-wide setting only (ALTER DATABASE ... SET, which
-- is transactional: rolled back with the test); a session-level SET is ignored.
CREATE FUNCTION pg_temp.set_timeout(p_value text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET undolog.approval_timeout = %L',
                   current_database(), p_value);
END $$;

CREATE FUNCTION pg_temp.gated_call(p_session uuid, p_tool text)
RETURNS uuid LANGUAGE sql AS $$
    SELECT pg_temp.tool(p_tool, 'irreversible');
    SELECT undolog.begin_session(p_session);
    SELECT i.approval_id
    FROM undolog.intercept(p_session, 0, p_tool, 'irreversible',
                           jsonb_build_object('target', p_tool),
                           pg_temp.sig(p_session::text || p_tool)) AS i;
$$;

-- The clock moves on: the request's deadline is now p_ago in the past.
CREATE FUNCTION pg_temp.deadline_passed(p_approval uuid, p_ago interval)
RETURNS void LANGUAGE sql AS $$
    ALTER TABLE undolog.undolog_approval_requests
        DISABLE TRIGGER undolog_approval_requests_guard;
    UPDATE undolog.undolog_approval_requests
    SET requested_at = now() - p_ago - interval '1 hour', expires_at = now() - p_ago
    WHERE approval_id = p_approval;
    ALTER TABLE undolog.undolog_approval_requests
        ENABLE TRIGGER undolog_approval_requests_guard;
$$;

-- ---------------------------------------------------------------------------------------
-- The setting.
-- ---------------------------------------------------------------------------------------
SELECT pg_temp.gated_call('a1000000-0000-4000-8000-000000000001', 'no_deadline')
    AS approval_none \gset
SELECT is(
    (SELECT expires_at FROM undolog.undolog_approval_requests
     WHERE approval_id = :'approval_none'),
    NULL, 'by default a request has no deadline'
);

SELECT pg_temp.set_timeout('2 hours');
SELECT pg_temp.gated_call('a1000000-0000-4000-8000-000000000002', 'two_hours')
    AS approval_2h \gset
SELECT is(
    (SELECT expires_at - requested_at FROM undolog.undolog_approval_requests
     WHERE approval_id = :'approval_2h'),
    interval '2 hours', 'undolog.approval_timeout sets the deadline of new requests'
);

SELECT pg_temp.set_timeout('PT30M');
SELECT pg_temp.gated_call('a1000000-0000-4000-8000-000000000003', 'thirty_minutes')
    AS approval_30m \gset
SELECT is(
    (SELECT expires_at - requested_at FROM undolog.undolog_approval_requests
     WHERE approval_id = :'approval_30m'),
    interval '30 minutes', 'any interval literal works (ISO 8601 here)'
);

SELECT pg_temp.set_timeout('');
SELECT pg_temp.gated_call('a1000000-0000-4000-8000-000000000004', 'reset')
    AS approval_reset \gset
SELECT is(
    (SELECT expires_at FROM undolog.undolog_approval_requests
     WHERE approval_id = :'approval_reset'),
    NULL, 'an empty setting means no deadline'
);

-- A bad setting refuses the call (UL008) and writes nothing: the body stays unrun.
SELECT undolog.begin_session('a1000000-0000-4000-8000-000000000005');
SELECT pg_temp.journal_state() AS before \gset
SELECT pg_temp.set_timeout('soon');
SET ROLE ul_t_agent;
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a1000000-0000-4000-8000-000000000005', 0, 'x',
        'irreversible', '{}', pg_temp.sig('bad setting'))$$,
    'UL008', 'undolog.approval_timeout must be a positive interval up to 10 years, not ''soon''',
    'a setting that is not an interval refuses the call with UL008'
);
RESET ROLE;
SELECT pg_temp.set_timeout('-1 hour');
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a1000000-0000-4000-8000-000000000005', 0, 'x',
        'irreversible', '{}', pg_temp.sig('bad setting'))$$,
    'UL008', NULL, 'a negative timeout refuses the call with UL008'
);
SELECT pg_temp.set_timeout('0');
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept('a1000000-0000-4000-8000-000000000005', 0, 'x',
        'irreversible', '{}', pg_temp.sig('bad setting'))$$,
    'UL008', NULL, 'a zero timeout refuses the call with UL008'
);
SELECT is(pg_temp.journal_state(), :'before', 'a refused call under a bad setting wrote nothing');
SELECT pg_temp.set_timeout('4 hours');
SELECT is(
    (SELECT action FROM undolog.intercept('a1000000-0000-4000-8000-000000000005', 0, 'x',
        'irreversible', '{}', pg_temp.sig('bad setting'))),
    'await_approval', 'once the setting is fixed, the same call is gated as usual'
);
-- An agent cannot choose its own deadline: a session-level SET is ignored.
SET undolog.approval_timeout = '200000 years';
SELECT pg_temp.gated_call('a1000000-0000-4000-8000-000000000006', 'own') AS approval_own \gset
SELECT is(
    (SELECT expires_at - requested_at FROM undolog.undolog_approval_requests
     WHERE approval_id = :'approval_own'),
    interval '4 hours', 'a session-level SET of the timeout is ignored'
);
RESET undolog.approval_timeout;
SELECT pg_temp.set_timeout('');
SELECT throws_ok(
    $$INSERT INTO undolog.undolog_approval_requests
        (session_id, effect_id, executed_at, requested_at, expires_at)
      VALUES ('a1000000-0000-4000-8000-000000000005', gen_random_uuid(), now(), now(), now())$$,
    'UL008', NULL, 'a deadline must come after the request'
);

-- ---------------------------------------------------------------------------------------
-- Approving after the deadline: UL015, nothing changed.
-- ---------------------------------------------------------------------------------------
SELECT pg_temp.deadline_passed(:'approval_2h', interval '1 minute');
SET ROLE ul_t_approver;
SELECT set_eq(
    $$SELECT approval_id, expired FROM undolog.pending_approvals
      WHERE session_id::text LIKE 'a1000000-%'$$,
    format($$SELECT approval_id, approval_id = %L FROM undolog.undolog_approval_requests
             WHERE session_id::text LIKE 'a1000000-%%'$$, :'approval_2h'),
    'pending_approvals lists every waiting request and flags the one past its deadline'
);
RESET ROLE;
SELECT pg_temp.journal_state() AS before \gset
SET ROLE ul_t_approver;
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, 'alice', 'finally')$$, :'approval_2h'),
    'UL015', NULL, 'approving after the deadline raises UL015'
);
RESET ROLE;
SELECT is(pg_temp.journal_state(), :'before', 'the refused late approval changed nothing');
SELECT results_eq(
    $$SELECT a.state, e.state, s.state FROM undolog.undolog_approval_requests AS a
      JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
      JOIN undolog.undolog_sessions AS s USING (session_id)
      WHERE a.approval_id = '$$ || :'approval_2h' || $$'$$,
    $$VALUES ('pending'::text, 'pending'::text, 'awaiting_approval'::text)$$,
    'the call is still unrun and the session still waits, until the expiry is recorded'
);

-- ---------------------------------------------------------------------------------------
-- expire_approvals: the operator's sweep records it, through the same path as reject.
-- ---------------------------------------------------------------------------------------
SET ROLE ul_t_operator;
SELECT results_eq(
    'SELECT * FROM undolog.expire_approvals()',
    format('VALUES (%L::uuid)', :'approval_2h'),
    'expire_approvals expires exactly the request past its deadline'
);
RESET ROLE;
SELECT results_eq(
    $$SELECT state, decided_by, reason, decided_at BETWEEN now() AND clock_timestamp(),
             decided_role = session_user::text
      FROM undolog.undolog_approval_requests WHERE approval_id = '$$ || :'approval_2h' || $$'$$,
    $$VALUES ('expired'::text, NULL::text, NULL::text, true, true)$$,
    'the request is expired by the engine (no person decided)'
);
SELECT results_eq(
    $$SELECT e.state, e.error = format('approval expired at %s', undolog.chain_time(a.expires_at)), s.state
      FROM undolog.undolog_approval_requests AS a
      JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
      JOIN undolog.undolog_sessions AS s USING (session_id)
      WHERE a.approval_id = '$$ || :'approval_2h' || $$'$$,
    $$VALUES ('rejected'::text, true, 'compensating'::text)$$,
    'expiry: effect rejected, session compensating, as for a rejection'
);
SET ROLE ul_t_agent;
SELECT is(
    (SELECT action FROM undolog.intercept('a1000000-0000-4000-8000-000000000002', 0,
        'two_hours', 'irreversible', '{"target": "two_hours"}',
        pg_temp.sig('a1000000-0000-4000-8000-000000000002' || 'two_hours'))),
    'rejected', 'the expired call, made again, is answered rejected'
);
RESET ROLE;
SET ROLE ul_t_operator;
SELECT is_empty('SELECT * FROM undolog.expire_approvals()',
                'a second sweep finds nothing more to expire');
RESET ROLE;
SELECT results_eq(
    $$SELECT state FROM undolog.undolog_approval_requests
      WHERE approval_id IN ('$$ || :'approval_none' || $$', '$$ || :'approval_30m' || $$',
                            '$$ || :'approval_reset' || $$')$$,
    $$VALUES ('pending'::text), ('pending'), ('pending')$$,
    'requests with no deadline, or one still ahead, are left pending'
);
SELECT pg_temp.journal_state() AS before \gset
SET ROLE ul_t_approver;
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, 'alice')$$, :'approval_2h'),
    'UL014', NULL, 'approving a request once its expiry is recorded raises UL014'
);
SELECT throws_ok(
    format($$SELECT undolog.reject(%L, 'alice')$$, :'approval_2h'),
    'UL014', NULL, 'rejecting a request once its expiry is recorded raises UL014'
);
RESET ROLE;
SELECT is(pg_temp.journal_state(), :'before', 'deciding an expired request changed nothing');
SET ROLE ul_t_approver;
SELECT results_eq(
    $$SELECT decision, decided_by, tool_name, effect_state FROM undolog.decided_approvals
      WHERE approval_id = '$$ || :'approval_2h' || $$'$$,
    $$VALUES ('expired'::text, NULL::text, 'two_hours'::text, 'rejected'::text)$$,
    'decided_approvals shows the expiry'
);
RESET ROLE;

-- ---------------------------------------------------------------------------------------
-- Rejecting after the deadline: the human's "no" is honoured at once (no error), and the
-- record says truthfully that the deadline came first.
-- ---------------------------------------------------------------------------------------
SELECT pg_temp.deadline_passed(:'approval_30m', interval '5 minutes');
SET ROLE ul_t_approver;
SELECT is(
    undolog.reject(:'approval_30m', 'carol', 'too late anyway'),
    'expired', 'rejecting after the deadline answers expired'
);
RESET ROLE;
SELECT results_eq(
    $$SELECT a.state, a.decided_by, a.reason, e.state, s.state
      FROM undolog.undolog_approval_requests AS a
      JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
      JOIN undolog.undolog_sessions AS s USING (session_id)
      WHERE a.approval_id = '$$ || :'approval_30m' || $$'$$,
    $$VALUES ('expired'::text, 'carol'::text, 'too late anyway'::text, 'rejected'::text,
              'compensating'::text)$$,
    'a late rejection records the expiry, who closed it and why; the effect is rejected '
    'and the session compensating'
);
SELECT matches(
    (SELECT e.error FROM undolog.undolog_approval_requests AS a
     JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
     WHERE a.approval_id = :'approval_30m'),
    '^approval expired at .* \(closed by carol\): too late anyway$',
    'the effect says it expired and who closed it'
);

-- A sweep and a late reject do not fight: whichever comes first decides; the sweep skips
-- what is already decided (here a late reject, earlier in this transaction).
SELECT pg_temp.deadline_passed(:'approval_none', interval '1 second');
SET ROLE ul_t_approver;
SELECT is(undolog.reject(:'approval_none', 'dave'), 'expired', 'late reject first');
RESET ROLE;
SET ROLE ul_t_operator;
SELECT is_empty('SELECT * FROM undolog.expire_approvals()',
                'the sweep afterwards has nothing left to expire');
RESET ROLE;

-- Rejecting before the deadline is a plain rejection.
SET ROLE ul_t_approver;
SELECT is(undolog.reject(:'approval_reset', 'erin'), 'rejected',
          'rejecting in time answers rejected');
RESET ROLE;

-- An approval in time, with a deadline set, is a plain approval.
SELECT approval_id AS approval_5 FROM undolog.undolog_approval_requests
WHERE session_id = 'a1000000-0000-4000-8000-000000000005' \gset
SET ROLE ul_t_approver;
SELECT is(undolog.approve(:'approval_5', 'frank'), 'approved',
          'approving before the deadline answers approved');
RESET ROLE;
SELECT is(
    (SELECT state FROM undolog.undolog_sessions
     WHERE session_id = 'a1000000-0000-4000-8000-000000000005'),
    'active', 'and resumes the session'
);

-- ---------------------------------------------------------------------------------------
-- expire_approvals over several sessions at once.
-- ---------------------------------------------------------------------------------------
SELECT pg_temp.gated_call('b1000000-0000-4000-8000-000000000001', 'one') AS approval_x1 \gset
SELECT pg_temp.gated_call('b1000000-0000-4000-8000-000000000002', 'two') AS approval_x2 \gset
SELECT pg_temp.gated_call('b1000000-0000-4000-8000-000000000003', 'three') AS approval_x3 \gset
SELECT pg_temp.deadline_passed(:'approval_x1', interval '1 day');
SELECT pg_temp.deadline_passed(:'approval_x3', interval '1 second');
SET ROLE ul_t_operator;
SELECT results_eq(
    'SELECT * FROM undolog.expire_approvals() ORDER BY 1',
    format('SELECT * FROM (VALUES (%L::uuid), (%L::uuid)) AS v ORDER BY 1',
           :'approval_x1', :'approval_x3'),
    'one sweep expires every due request, across sessions'
);
RESET ROLE;
SELECT results_eq(
    $$SELECT session_id, state FROM undolog.undolog_sessions
      WHERE session_id::text LIKE 'b1000000-%' ORDER BY session_id$$,
    $$VALUES ('b1000000-0000-4000-8000-000000000001'::uuid, 'compensating'::text),
             ('b1000000-0000-4000-8000-000000000002', 'awaiting_approval'),
             ('b1000000-0000-4000-8000-000000000003', 'compensating')$$,
    'their sessions go to their undo walks; the one not due keeps waiting'
);

-- ---------------------------------------------------------------------------------------
-- p_limit: at most that many expired by one call, in session order; the rest are left
-- for the next call (the binding calls it 50 at a time, a transaction each).
-- ---------------------------------------------------------------------------------------
SELECT pg_temp.gated_call('c1000000-0000-4000-8000-000000000001', 'c_one') AS approval_c1 \gset
SELECT pg_temp.gated_call('c1000000-0000-4000-8000-000000000002', 'c_two') AS approval_c2 \gset
SELECT pg_temp.gated_call('c1000000-0000-4000-8000-000000000003', 'c_three') AS approval_c3 \gset
SELECT pg_temp.deadline_passed(:'approval_c1', interval '1 minute');
SELECT pg_temp.deadline_passed(:'approval_c2', interval '1 minute');
SELECT pg_temp.deadline_passed(:'approval_c3', interval '1 minute');
SET ROLE ul_t_operator;
SELECT results_eq(
    'SELECT * FROM undolog.expire_approvals(p_limit => 1)',
    format('VALUES (%L::uuid)', :'approval_c1'),
    'a limit of 1 expires one request, the first due in session order'
);
SELECT results_eq(
    'SELECT * FROM undolog.expire_approvals(p_limit => 1)',
    format('VALUES (%L::uuid)', :'approval_c2'),
    'the next call expires the next one'
);
SELECT results_eq(
    'SELECT * FROM undolog.expire_approvals(p_limit => 5)',
    format('VALUES (%L::uuid)', :'approval_c3'),
    'a call answering fewer than its limit has expired every request due'
);
SELECT is_empty('SELECT * FROM undolog.expire_approvals(p_limit => 1)',
                'then a call with a limit finds nothing more');
RESET ROLE;
SELECT results_eq(
    $$SELECT state, count(*)::integer FROM undolog.undolog_sessions
      WHERE session_id::text LIKE 'c1000000-%' GROUP BY state$$,
    $$VALUES ('compensating'::text, 3)$$,
    'each of their sessions goes to its undo walk, as after a sweep without a limit'
);
SET ROLE ul_t_operator;
SELECT throws_ok(
    'SELECT undolog.expire_approvals(p_limit => 0)',
    'UL008', 'p_limit must be at least 1, not 0',
    'a limit of 0 is refused (UL008)'
);
RESET ROLE;
SELECT * FROM pg_temp.refused('SELECT undolog.expire_approvals(-1)', 'UL008',
                              'a negative limit is refused (UL008)');

-- Who may sweep: the operator (above), not the agent nor the approver.
SET ROLE ul_t_agent;
SELECT throws_ok('SELECT undolog.expire_approvals()', '42501', NULL,
                 'the agent role cannot run expire_approvals (42501)');
RESET ROLE;
SET ROLE ul_t_approver;
SELECT throws_ok('SELECT undolog.expire_approvals()', '42501', NULL,
                 'the approver role cannot run expire_approvals (42501)');
RESET ROLE;

SELECT is(
    (SELECT state FROM undolog.undolog_approval_requests WHERE approval_id = :'approval_x2'),
    'pending', 'the request not due is untouched by everything above'
);

SELECT * FROM finish();
ROLLBACK;
