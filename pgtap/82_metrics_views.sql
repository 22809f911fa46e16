-- The metrics views (sql/views/metrics_*.sql), read by `undolog metrics` and the
-- dashboard's /metrics: their values after each step of a session's life, and who may
-- read them (approver and operator; an agent, whose sessions are its own, none of them).
BEGIN;
SELECT plan(37);

\ir _helpers.psql

CREATE ROLE ul_t_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_operator NOLOGIN IN ROLE undolog_operator;

-- Two active sessions (one with an approved irreversible call), one waiting for a
-- decision, one completed.
SELECT pg_temp.new_session() AS s_active \gset
SELECT pg_temp.call(:'s_active', 1) AS e_active \gset
SELECT pg_temp.new_session() AS s_wait \gset
SELECT pg_temp.irreversible(:'s_wait', 1, 'pending') AS e_wait \gset
SELECT pg_temp.new_session() AS s_appr \gset
SELECT pg_temp.irreversible(:'s_appr', 1, 'approved') AS e_appr \gset
SELECT pg_temp.new_session() AS s_done \gset
SELECT undolog.complete_session(:'s_done');

SELECT results_eq(
    $$SELECT state, sessions FROM undolog.metrics_sessions ORDER BY state$$,
    $$VALUES ('active', 2::bigint), ('awaiting_approval', 1), ('compensating', 0), ('failed', 0),
             ('halted', 0)$$,
    'metrics_sessions counts the live sessions by state, every live state listed'
);
SELECT results_eq(
    $$SELECT pending, past_deadline FROM undolog.metrics_approvals$$,
    $$VALUES (1::bigint, 0::bigint)$$,
    'metrics_approvals counts the pending request'
);
SELECT results_eq(
    $$SELECT decision, decided FROM undolog.metrics_approval_decisions ORDER BY decision$$,
    $$VALUES ('approved', 1::bigint), ('expired', 0), ('rejected', 0)$$,
    'metrics_approval_decisions counts the last hour''s decisions by decision'
);
SELECT results_eq(
    $$SELECT tier, state, calls FROM undolog.metrics_calls ORDER BY tier, state$$,
    $$VALUES ('compensable', 'committed', 1::bigint), ('irreversible', 'approved', 1),
             ('irreversible', 'pending', 1)$$,
    'metrics_calls counts the recent calls by tier and current state'
);
SELECT results_eq(
    $$SELECT due_sessions FROM undolog.metrics_worker$$, $$VALUES (0::bigint)$$,
    'nothing is due for the worker'
);

-- A session fails: its walk is due.
SELECT pg_temp.new_session() AS s_fail \gset
SELECT pg_temp.call(:'s_fail', 1, 'committed', '{"name": "undo_step", "max_attempts": 3}')
    AS e_fail \gset
SELECT undolog.fail_session(:'s_fail', 'boom');
SELECT results_eq(
    $$SELECT due_sessions FROM undolog.metrics_worker$$, $$VALUES (1::bigint)$$,
    'metrics_worker counts the failed session as due'
);
SELECT is(
    (SELECT sessions FROM undolog.metrics_sessions WHERE state = 'failed'), 1::bigint,
    'metrics_sessions counts it failed'
);

-- A walker claims its compensation: in flight, no longer due.
SELECT c.undo_id AS u_fail FROM undolog.claim_compensation(:'s_fail') AS c \gset
SELECT results_eq(
    $$SELECT attempts, failures, gave_up, in_flight, retrying FROM undolog.metrics_compensations$$,
    $$VALUES (1::bigint, 0::bigint, 0::bigint, 1::bigint, 0::bigint)$$,
    'metrics_compensations: one attempt started, in flight'
);
SELECT results_eq(
    $$SELECT due_sessions FROM undolog.metrics_worker$$, $$VALUES (0::bigint)$$,
    'a walk in flight under a live claim is not due'
);

-- The attempt fails; the entry waits for its retry.
SELECT undolog.fail_compensation(:'u_fail', 'try 1');
SELECT results_eq(
    $$SELECT attempts, failures, gave_up, in_flight, retrying FROM undolog.metrics_compensations$$,
    $$VALUES (1::bigint, 1::bigint, 0::bigint, 0::bigint, 1::bigint)$$,
    'metrics_compensations: the failed attempt, the entry waiting for its retry'
);

-- A result that arrives after the walk undid its call.
SELECT pg_temp.new_session() AS s_late \gset
SELECT pg_temp.call(:'s_late', 1, 'executing') AS e_late \gset
SELECT undolog.fail_session(:'s_late', 'lease ran out');
SELECT undolog.complete_compensation(c.undo_id) FROM undolog.claim_compensation(:'s_late') AS c;
SELECT is(undolog.commit(:'e_late', '{"id": 1}'), 'late', 'the commit arrives late');
SELECT results_eq(
    $$SELECT late_results, last_at IS NOT NULL FROM undolog.metrics_late_results$$,
    $$VALUES (1::bigint, TRUE)$$,
    'metrics_late_results counts it'
);

-- The finished sessions' volume is estimated from the planner's statistics.
SELECT pg_temp.add_session('completed') FROM generate_series(1, 10);
ANALYZE undolog.undolog_sessions;
SELECT is(
    (SELECT sessions FROM undolog.metrics_sessions_estimated WHERE state = 'completed'),
    11::bigint,
    'metrics_sessions_estimated: the completed sessions, as ANALYZE counted them'
);

-- Who may read them: staff, not agents (the counts cover every login's sessions).
SET SESSION AUTHORIZATION ul_t_agent;
SELECT throws_ok(format('SELECT * FROM undolog.%I', v), '42501', NULL,
                 format('an agent may not read %s', v))
FROM unnest(ARRAY[
    'metrics_sessions', 'metrics_sessions_estimated', 'metrics_approvals',
    'metrics_approval_decisions', 'metrics_calls', 'metrics_compensations',
    'metrics_worker', 'metrics_late_results'
]) AS v;
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_approver;
SELECT lives_ok(format('SELECT * FROM undolog.%I', v), format('an approver reads %s', v))
FROM unnest(ARRAY[
    'metrics_sessions', 'metrics_sessions_estimated', 'metrics_approvals',
    'metrics_approval_decisions', 'metrics_calls', 'metrics_compensations',
    'metrics_worker', 'metrics_late_results'
]) AS v;
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_operator;
SELECT lives_ok(format('SELECT * FROM undolog.%I', v), format('an operator reads %s', v))
FROM unnest(ARRAY[
    'metrics_sessions', 'metrics_sessions_estimated', 'metrics_approvals',
    'metrics_approval_decisions', 'metrics_calls', 'metrics_compensations',
    'metrics_worker', 'metrics_late_results'
]) AS v;
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
