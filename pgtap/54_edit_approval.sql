-- Edit, then approve: approve_edited records the arguments a person approves instead of
-- the requested ones; the effect keeps the requested args (its identity), the request
-- and the effect's history record the edit, who and why; the same call made again is
-- answered 'execute' naming the approval, approval_edit hands back the approved args,
-- and once committed the call replays. Edited args are checked like any args, an edit
-- of a decided request is refused (UL023), and so is one that names other arguments
-- (UL024). Logins are played with SET SESSION AUTHORIZATION (ownership is
-- session_user), the approver with SET ROLE.
BEGIN;
SELECT plan(43);

\ir _helpers.psql

CREATE ROLE ul_t_ed_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_ed_other NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_ed_approver NOLOGIN IN ROLE undolog_approver;

-- An IRREVERSIBLE call of the agent login in a new session; answers its approval id.
CREATE FUNCTION pg_temp.asked(p_session uuid, p_args jsonb)
RETURNS uuid LANGUAGE sql AS $$
    SELECT pg_temp.tool('wire', 'irreversible');
    SELECT undolog.begin_session(p_session);
    SELECT i.approval_id
    FROM undolog.intercept(p_session, 0, 'wire', 'irreversible', p_args,
                           pg_temp.sig(p_session::text)) AS i;
$$;
GRANT EXECUTE ON FUNCTION pg_temp.asked(uuid, jsonb) TO PUBLIC;

SET SESSION AUTHORIZATION ul_t_ed_agent;
SELECT pg_temp.asked('e0000000-0000-4000-8000-000000000001',
                     '{"amount": 1000, "to": "acct-1"}') AS approval_e \gset
RESET SESSION AUTHORIZATION;
SELECT effect_id AS effect_e FROM undolog.undolog_approval_requests
WHERE approval_id = :'approval_e' \gset

-- ---------------------------------------------------------------------------------------
-- Who may edit
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_ed_agent;
SELECT throws_ok(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'mallory',
                                    '{"amount": 1, "to": "acct-1"}')$$,
    '42501', NULL, 'an agent login cannot approve with edited args');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT state FROM undolog.undolog_approval_requests
           WHERE approval_id = :'approval_e'), 'pending', 'the agent''s try decided nothing');
SELECT is(
    (SELECT count(*)::integer FROM pg_catalog.pg_proc
     WHERE proname = 'decide_approval' AND pronamespace = 'undolog'::regnamespace),
    1, 'exactly one decide_approval');
SELECT ok(NOT has_function_privilege('undolog_agent',
                                     'undolog.approve_edited(uuid, text, jsonb, text)',
                                     'EXECUTE'),
          'the agent role has no EXECUTE on approve_edited');

-- ---------------------------------------------------------------------------------------
-- Edited args are checked like any args, and the edit must keep the call's arguments
-- ---------------------------------------------------------------------------------------
SET ROLE ul_t_ed_approver;
SELECT * FROM pg_temp.refused(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'alice', '[1, 2]')$$,
    'UL008', 'edited args that are not a JSON object: UL008');
SELECT * FROM pg_temp.refused(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'alice', NULL)$$,
    'UL008', 'edited args NULL: UL008');
SELECT * FROM pg_temp.refused(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'alice',
        jsonb_build_object('amount', repeat('x', 1100000), 'to', 'acct-1'))$$,
    'UL009', 'edited args over the size limit: UL009');
SELECT * FROM pg_temp.refused(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'alice',
        jsonb_build_object('amount', (repeat('[', 70) || repeat(']', 70))::jsonb,
                           'to', 'acct-1'))$$,
    'UL009', 'edited args nested past the depth limit: UL009');
SELECT * FROM pg_temp.refused(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'alice',
        '{"amount": 10, "to": "acct-1", "tool_name": "drop_database"}')$$,
    'UL024', 'an edit that adds an argument (a tool, a session, anything): UL024');
SELECT * FROM pg_temp.refused(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'alice', '{"amount": 10}')$$,
    'UL024', 'an edit that drops an argument: UL024');
SELECT * FROM pg_temp.refused(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', ' ',
                                    '{"amount": 10, "to": "acct-1"}')$$,
    'UL008', 'an edit names who decides: UL008');
SELECT throws_like(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'alice',
        '{"amount": 10, "to": "acct-1", "session_id": "x"}')$$,
    '%must name the same arguments as the call of wire%',
    'UL024 names the tool');

-- ---------------------------------------------------------------------------------------
-- The edit
-- ---------------------------------------------------------------------------------------
SELECT is(
    undolog.approve_edited(:'approval_e', 'alice@example.com',
                           '{"amount": 100, "to": "acct-1"}', 'over the daily limit'),
    'approved', 'approve_edited answers approved');
RESET ROLE;

SELECT results_eq(
    $$SELECT state, approved_args, decided_by, reason, decided_role = session_user::text
      FROM undolog.undolog_approval_requests WHERE approval_id = '$$ || :'approval_e' || $$'$$,
    $$VALUES ('approved'::text, '{"amount": 100, "to": "acct-1"}'::jsonb,
              'alice@example.com'::text, 'over the daily limit'::text, true)$$,
    'the request records the approved args, who and why');
SELECT results_eq(
    $$SELECT state, args, tool_name, session_id FROM undolog.undolog_effect_log
      WHERE effect_id = '$$ || :'effect_e' || $$'$$,
    $$VALUES ('approved'::text, '{"amount": 1000, "to": "acct-1"}'::jsonb, 'wire'::text,
              'e0000000-0000-4000-8000-000000000001'::uuid)$$,
    'the effect keeps the requested args, its tool and its session');
SELECT results_eq(
    $$SELECT event, from_state, to_state, detail FROM undolog.effect_timeline
      WHERE effect_id = '$$ || :'effect_e' || $$' ORDER BY seq$$,
    $$VALUES ('transition'::text, NULL::text, 'pending'::text, NULL::jsonb),
             ('transition', 'pending', 'approved', NULL),
             ('args_edited', 'approved', 'approved',
              jsonb_build_object('approval_id', '$$ || :'approval_e' || $$'::uuid,
                                 'approved_args', '{"amount": 100, "to": "acct-1"}'::jsonb,
                                 'edited_by', 'alice@example.com',
                                 'reason', 'over the daily limit'))$$,
    'the effect timeline records its creation, the transition, then the edit, who and why');
SELECT is(
    (SELECT state FROM undolog.undolog_sessions
     WHERE session_id = 'e0000000-0000-4000-8000-000000000001'),
    'active', 'an edited approval resumes the session like an approval');

-- A decided request is frozen: no second edit, no edit by the table's owner.
SET ROLE ul_t_ed_approver;
SELECT * FROM pg_temp.refused(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'bob',
                                    '{"amount": 1, "to": "acct-1"}')$$,
    'UL023', 'an edit of a decided request: UL023');
SELECT throws_like(
    $$SELECT undolog.approve_edited('$$ || :'approval_e' || $$', 'bob',
                                    '{"amount": 1, "to": "acct-1"}')$$,
    '%already decided (approved): its args can no longer be edited%',
    'UL023 says the request was decided and how');
SELECT * FROM pg_temp.refused(
    $$SELECT undolog.approve('$$ || :'approval_e' || $$', 'bob')$$,
    'UL014', 'approving it again is still UL014');
RESET ROLE;
SELECT * FROM pg_temp.refused(
    $$UPDATE undolog.undolog_approval_requests SET approved_args = '{"amount": 1, "to": "x"}'
      WHERE approval_id = '$$ || :'approval_e' || $$'$$,
    'UL014', 'not even the table''s owner edits a decided request');

-- ---------------------------------------------------------------------------------------
-- The agent's call again: execute with the approved args, once; then replay
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_ed_agent;
SELECT results_eq(
    $$SELECT action, state, approval_id FROM undolog.intercept(
        'e0000000-0000-4000-8000-000000000001', 0, 'wire', 'irreversible',
        '{"amount": 1000, "to": "acct-1"}', pg_temp.sig('e0000000-0000-4000-8000-000000000001'))$$,
    $$VALUES ('execute'::text, 'executing'::text, '$$ || :'approval_e' || $$'::uuid)$$,
    'the same call (requested args, same signature) executes, naming the edited approval');
SELECT results_eq(
    $$SELECT approval_id, tool_name, requested_args, approved_args, decided_by, reason
      FROM undolog.approval_edit('e0000000-0000-4000-8000-000000000001',
                                 '$$ || :'effect_e' || $$')$$,
    $$VALUES ('$$ || :'approval_e' || $$'::uuid, 'wire'::text,
              '{"amount": 1000, "to": "acct-1"}'::jsonb, '{"amount": 100, "to": "acct-1"}'::jsonb,
              'alice@example.com'::text, 'over the daily limit'::text)$$,
    'approval_edit hands the agent both args, who edited and why');
SELECT results_eq(
    $$SELECT action FROM undolog.intercept(
        'e0000000-0000-4000-8000-000000000001', 0, 'wire', 'irreversible',
        '{"amount": 1000, "to": "acct-1"}', pg_temp.sig('e0000000-0000-4000-8000-000000000001'))$$,
    $$VALUES ('in_progress'::text)$$,
    'while it runs, the call made again is in_progress: the body runs once');
SELECT undolog.commit(:'effect_e', '{"sent": 100}');
SELECT results_eq(
    $$SELECT action, result_snapshot, approval_id FROM undolog.intercept(
        'e0000000-0000-4000-8000-000000000001', 0, 'wire', 'irreversible',
        '{"amount": 1000, "to": "acct-1"}', pg_temp.sig('e0000000-0000-4000-8000-000000000001'))$$,
    $$VALUES ('replay'::text, '{"sent": 100}'::jsonb, NULL::uuid)$$,
    'the same call again replays the result of the edited call');
SELECT throws_ok(
    $$SELECT * FROM undolog.intercept(
        'e0000000-0000-4000-8000-000000000001', 0, 'wire', 'irreversible',
        '{"amount": 100, "to": "acct-1"}', pg_temp.sig('e0000000-0000-4000-8000-000000000001'))$$,
    'UL005', NULL, 'the approved args under the requested call''s signature are another call: UL005');
RESET SESSION AUTHORIZATION;

-- Another agent sees no edit of a session it did not begin; the approver sees it.
SET SESSION AUTHORIZATION ul_t_ed_other;
SELECT is_empty(
    $$SELECT * FROM undolog.approval_edit('e0000000-0000-4000-8000-000000000001',
                                          '$$ || :'effect_e' || $$')$$,
    'another agent login reads no edit of a session it did not begin');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_ed_approver;
SELECT is(
    (SELECT approved_args FROM undolog.approval_edit('e0000000-0000-4000-8000-000000000001',
                                                     :'effect_e')),
    '{"amount": 100, "to": "acct-1"}'::jsonb, 'an approver reads the edit');
RESET ROLE;

-- ---------------------------------------------------------------------------------------
-- The requested args approved as an edit: no edit
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_ed_agent;
SELECT pg_temp.asked('e0000000-0000-4000-8000-000000000002', '{"amount": 5, "to": "acct-2"}')
    AS approval_same \gset
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_ed_approver;
SELECT is(undolog.approve_edited(:'approval_same', 'alice', '{"to": "acct-2", "amount": 5}'),
          'approved', 'the requested args, in another key order, approve as asked');
RESET ROLE;
SELECT is(
    (SELECT approved_args FROM undolog.undolog_approval_requests
     WHERE approval_id = :'approval_same'),
    NULL, 'no edit is recorded');
SET SESSION AUTHORIZATION ul_t_ed_agent;
SELECT results_eq(
    $$SELECT action, approval_id FROM undolog.intercept(
        'e0000000-0000-4000-8000-000000000002', 0, 'wire', 'irreversible',
        '{"amount": 5, "to": "acct-2"}', pg_temp.sig('e0000000-0000-4000-8000-000000000002'))$$,
    $$VALUES ('execute'::text, NULL::uuid)$$,
    'an approval as asked executes without naming the approval, as before');
RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------------------
-- The table's own rule
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_ed_agent;
SELECT pg_temp.asked('e0000000-0000-4000-8000-000000000003', '{"amount": 7, "to": "acct-3"}')
    AS approval_late \gset
RESET SESSION AUTHORIZATION;
SELECT throws_ok(
    $$UPDATE undolog.undolog_approval_requests
      SET state = 'rejected', decided_at = now(), decided_by = 'x', decided_role = 'x',
          approved_args = '{"amount": 1}'
      WHERE approval_id = '$$ || :'approval_late' || $$'$$,
    '23514', NULL, 'the table refuses approved args on a request that is not approved');
SELECT throws_ok(
    $$INSERT INTO undolog.undolog_approval_requests
          (session_id, effect_id, executed_at, approved_args)
      SELECT session_id, effect_id, executed_at, '{}' FROM undolog.undolog_approval_requests
      WHERE approval_id = '$$ || :'approval_late' || $$'$$,
    '23514', NULL, 'a new request carries no approved args');

SELECT * FROM finish();
ROLLBACK;
