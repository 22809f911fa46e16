-- What a framework adapter reads of its calls' approvals: undolog.call_approvals (a call's
-- request by its signature or its step, held as pending while another request of its
-- session is) and undolog.ending_decision (the refusal that ended a session). Each login
-- sees only what its row-level security shows: an agent its own sessions, an approver
-- every one. Logins are played with SET SESSION AUTHORIZATION (ownership is session_user).
BEGIN;
SELECT plan(12);

\ir _helpers.psql

CREATE ROLE ul_t_ca_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_ca_other NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_ca_approver NOLOGIN IN ROLE undolog_approver;

CREATE FUNCTION pg_temp.ask(p_session uuid, p_step integer, p_tool text)
RETURNS uuid LANGUAGE sql AS $$
    SELECT i.approval_id
    FROM undolog.intercept(p_session, p_step, p_tool, 'irreversible',
                           jsonb_build_object('n', p_step),
                           pg_temp.sig(p_session::text || p_step || p_tool)) AS i
$$;
GRANT EXECUTE ON FUNCTION pg_temp.ask(uuid, integer, text) TO PUBLIC;

SET SESSION AUTHORIZATION ul_t_ca_agent;
SELECT pg_temp.tool('wire', 'irreversible');
SELECT pg_temp.tool('mail', 'irreversible');
SELECT undolog.begin_session('ca000000-0000-4000-8000-00000000000a');
SELECT pg_temp.ask('ca000000-0000-4000-8000-00000000000a', 0, 'wire') AS wire \gset
SELECT pg_temp.ask('ca000000-0000-4000-8000-00000000000a', 1, 'mail') AS mail \gset

SELECT results_eq(
    $$SELECT approval_id, state, state_for_the_agent FROM undolog.call_approvals
      WHERE session_id = 'ca000000-0000-4000-8000-00000000000a'
        AND call_signature = pg_temp.sig('ca000000-0000-4000-8000-00000000000a' || 0 || 'wire')$$,
    format($$VALUES (%L::uuid, 'pending', 'pending')$$, :'wire'),
    'a call''s request is found by its session and signature'
);
SELECT results_eq(
    $$SELECT approval_id FROM undolog.call_approvals
      WHERE session_id = 'ca000000-0000-4000-8000-00000000000a' AND step_index = 1
        AND tool_name = 'mail'$$,
    format($$VALUES (%L::uuid)$$, :'mail'),
    '... and by its step and tool'
);
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_ca_other;
SELECT is((SELECT count(*) FROM undolog.call_approvals), 0::bigint,
          'another agent login sees none of the session''s requests');
SELECT is((SELECT count(*) FROM undolog.ending_decision('ca000000-0000-4000-8000-00000000000a')),
          0::bigint, '... nor what ended it');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_ca_approver;
SELECT is((SELECT count(*) FROM undolog.call_approvals
           WHERE session_id = 'ca000000-0000-4000-8000-00000000000a'), 2::bigint,
          'an approver sees every request');
SELECT undolog.approve(:'wire', 'ada@example.com', 'fine');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_ca_agent;
SELECT results_eq(
    format($$SELECT state, state_for_the_agent FROM undolog.call_approvals
             WHERE approval_id = %L$$, :'wire'),
    $$VALUES ('approved', 'pending')$$,
    'an approved call waits as pending for the agent while another request is pending'
);
SELECT is((SELECT count(*) FROM undolog.ending_decision('ca000000-0000-4000-8000-00000000000a')),
          0::bigint, 'no refusal has ended the session: ending_decision has no row');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_ca_approver;
SELECT undolog.reject(:'mail', 'ada@example.com', 'not this one');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_ca_agent;
SELECT results_eq(
    format($$SELECT state, state_for_the_agent FROM undolog.call_approvals
             WHERE approval_id = %L$$, :'wire'),
    $$VALUES ('approved', 'approved')$$,
    'once no request is pending, the approved call is approved for the agent too'
);
SELECT results_eq(
    $$SELECT approval_id, decision, decided_by, reason, session_continues
      FROM undolog.ending_decision('ca000000-0000-4000-8000-00000000000a')$$,
    format($$VALUES (%L::uuid, 'rejected', 'ada@example.com', 'not this one', false)$$, :'mail'),
    'the agent reads the refusal that ended its session, who made it and why'
);
SELECT is((SELECT count(*) FROM undolog.ending_decision(NULL)), 0::bigint,
          'ending_decision of no session has no row');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_ca_approver;
SELECT is((SELECT approval_id FROM undolog.ending_decision('ca000000-0000-4000-8000-00000000000a')),
          :'mail'::uuid, 'an approver reads it too');
RESET SESSION AUTHORIZATION;
SELECT ok(has_function_privilege('undolog_agent', 'undolog.ending_decision(uuid)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'undolog.ending_decision(uuid)', 'EXECUTE'),
          'agents may call ending_decision; PUBLIC may not');

SELECT * FROM finish();
ROLLBACK;
