-- approve / reject: the approval gate's two decisions, their effect on the effect and the
-- session, the approved call executing exactly once, and every refusal writing nothing.
-- Runs as a test approver and a test agent: login-less roles that are members of the
-- group roles, created in this transaction (and rolled back with it).
BEGIN;
SELECT plan(71);

CREATE ROLE ul_t_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_operator NOLOGIN IN ROLE undolog_operator;

\ir _helpers.psql

-- An IRREVERSIBLE call in a new session, as the agent makes it; answers its approval id.
CREATE FUNCTION pg_temp.gated_call(p_session uuid, p_step integer, p_tool text)
RETURNS uuid LANGUAGE sql AS $$
    SELECT pg_temp.tool(p_tool, 'irreversible');
    SELECT undolog.begin_session(p_session);
    SELECT i.approval_id
    FROM undolog.intercept(p_session, p_step, p_tool, 'irreversible',
                           jsonb_build_object('target', p_tool),
                           pg_temp.sig(p_session::text || p_step || p_tool)) AS i;
$$;

-- ---------------------------------------------------------------------------------------
-- approve
-- ---------------------------------------------------------------------------------------
SELECT pg_temp.gated_call('a0000000-0000-4000-8000-000000000001', 0, 'drop_database')
    AS approval_a \gset
SELECT effect_id AS effect_a FROM undolog.undolog_approval_requests
WHERE approval_id = :'approval_a' \gset
-- The agent waited longer than its lease: approving must hand it a fresh one.
UPDATE undolog.undolog_sessions SET lease_expires_at = now() - interval '1 hour'
WHERE session_id = 'a0000000-0000-4000-8000-000000000001';

SELECT is(
    (SELECT state FROM undolog.undolog_sessions
     WHERE session_id = 'a0000000-0000-4000-8000-000000000001'),
    'awaiting_approval', 'an irreversible call leaves its session awaiting_approval'
);

SET ROLE ul_t_approver;
SELECT is(
    undolog.approve(:'approval_a', 'alice@example.com', 'checked the backup'),
    'approved', 'approve answers approved'
);
RESET ROLE;

SELECT results_eq(
    $$SELECT state, decided_by, reason, decided_at BETWEEN now() AND clock_timestamp(),
             decided_role = session_user::text
      FROM undolog.undolog_approval_requests WHERE approval_id = '$$ || :'approval_a' || $$'$$,
    $$VALUES ('approved'::text, 'alice@example.com'::text, 'checked the backup'::text, true,
              true)$$,
    'the request records the decision, who (as stated and as logged in), why and when'
);
SELECT is(
    (SELECT state FROM undolog.undolog_effect_log WHERE effect_id = :'effect_a'),
    'approved', 'approve: effect pending -> approved'
);
-- Its creation is recorded in its own row (no history_id), the approval as a history row.
SELECT results_eq(
    $$SELECT from_state, to_state, history_id IS NULL AS in_row FROM undolog.effect_timeline
      WHERE effect_id = '$$ || :'effect_a' || $$' ORDER BY seq$$,
    $$VALUES (NULL::text, 'pending'::text, true), ('pending', 'approved', false)$$,
    'the effect timeline records its creation, then pending -> approved in the history'
);
SELECT results_eq(
    $$SELECT state, lease_expires_at = now() + lease_duration FROM undolog.undolog_sessions
      WHERE session_id = 'a0000000-0000-4000-8000-000000000001'$$,
    $$VALUES ('active'::text, true)$$,
    'approve: session awaiting_approval -> active, with a fresh lease'
);
SELECT results_eq(
    $$SELECT from_state, to_state FROM undolog.undolog_session_history
      WHERE session_id = 'a0000000-0000-4000-8000-000000000001' ORDER BY history_id$$,
    $$VALUES (NULL::text, 'active'::text), ('active', 'awaiting_approval'),
             ('awaiting_approval', 'active')$$,
    'the session history records awaiting_approval -> active'
);

-- The same call made again executes, exactly once.
SET ROLE ul_t_agent;
SELECT results_eq(
    $$SELECT effect_id, action, state FROM undolog.intercept(
        'a0000000-0000-4000-8000-000000000001', 0, 'drop_database', 'irreversible',
        '{"target": "drop_database"}',
        pg_temp.sig('a0000000-0000-4000-8000-000000000001' || 0 || 'drop_database'))$$,
    $$VALUES ('$$ || :'effect_a' || $$'::uuid, 'execute'::text, 'executing'::text)$$,
    'after approval, the same call made again is told to execute'
);
SELECT results_eq(
    $$SELECT action FROM undolog.intercept(
        'a0000000-0000-4000-8000-000000000001', 0, 'drop_database', 'irreversible',
        '{"target": "drop_database"}',
        pg_temp.sig('a0000000-0000-4000-8000-000000000001' || 0 || 'drop_database'))$$,
    $$VALUES ('in_progress'::text)$$,
    'while it executes, asking again does not execute it a second time'
);
SELECT lives_ok(
    format($$SELECT undolog.commit(%L, '{"dropped": true}')$$, :'effect_a'),
    'the approved call commits'
);
SELECT results_eq(
    $$SELECT action, state, result_snapshot FROM undolog.intercept(
        'a0000000-0000-4000-8000-000000000001', 0, 'drop_database', 'irreversible',
        '{"target": "drop_database"}',
        pg_temp.sig('a0000000-0000-4000-8000-000000000001' || 0 || 'drop_database'))$$,
    $$VALUES ('replay'::text, 'committed'::text, '{"dropped": true}'::jsonb)$$,
    'once committed, the call replays its result'
);
RESET ROLE;
SELECT results_eq(
    $$SELECT from_state, to_state FROM undolog.effect_timeline
      WHERE effect_id = '$$ || :'effect_a' || $$' AND event = 'transition'
      ORDER BY seq$$,
    $$VALUES (NULL::text, 'pending'::text), ('pending', 'approved'), ('approved', 'executing'),
             ('executing', 'committed')$$,
    'approved -> executing -> committed, executing exactly once'
);
SELECT is(
    (SELECT attempts FROM undolog.undolog_effect_log WHERE effect_id = :'effect_a'), 1,
    'the approved call ran one attempt'
);

-- Deciding twice: UL014, nothing changed.
SELECT pg_temp.journal_state() AS before \gset
SET ROLE ul_t_approver;
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, 'bob', 'again')$$, :'approval_a'),
    'UL014', NULL, 'approving an approved request raises UL014'
);
SELECT throws_ok(
    format($$SELECT undolog.reject(%L, 'bob', 'changed my mind')$$, :'approval_a'),
    'UL014', NULL, 'rejecting an approved request raises UL014'
);
RESET ROLE;
SELECT is(pg_temp.journal_state(), :'before', 'deciding twice changed nothing');

-- ---------------------------------------------------------------------------------------
-- reject
-- ---------------------------------------------------------------------------------------
SELECT pg_temp.gated_call('b0000000-0000-4000-8000-000000000001', 0, 'wire_money')
    AS approval_b \gset
SELECT effect_id AS effect_b FROM undolog.undolog_approval_requests
WHERE approval_id = :'approval_b' \gset

SET ROLE ul_t_approver;
SELECT is(
    undolog.reject(:'approval_b', 'bob', 'amount too large'),
    'rejected', 'reject answers rejected'
);
RESET ROLE;

SELECT results_eq(
    $$SELECT state, decided_by, reason, decided_at IS NOT NULL
      FROM undolog.undolog_approval_requests WHERE approval_id = '$$ || :'approval_b' || $$'$$,
    $$VALUES ('rejected'::text, 'bob'::text, 'amount too large'::text, true)$$,
    'the request records the rejection, who and why'
);
SELECT results_eq(
    $$SELECT state, error FROM undolog.undolog_effect_log
      WHERE effect_id = '$$ || :'effect_b' || $$'$$,
    $$VALUES ('rejected'::text, 'rejected by bob: amount too large'::text)$$,
    'reject: effect pending -> rejected, with why'
);
SELECT results_eq(
    $$SELECT to_state, detail FROM undolog.undolog_effect_history
      WHERE effect_id = '$$ || :'effect_b' || $$' AND from_state = 'pending'$$,
    $$VALUES ('rejected'::text, '{"error": "rejected by bob: amount too large"}'::jsonb)$$,
    'the effect history records the rejection and why'
);
SELECT is(
    (SELECT state FROM undolog.undolog_sessions
     WHERE session_id = 'b0000000-0000-4000-8000-000000000001'),
    'compensating', 'reject: session awaiting_approval -> compensating (its undo walk)'
);
SELECT matches(
    (SELECT error FROM undolog.undolog_sessions
     WHERE session_id = 'b0000000-0000-4000-8000-000000000001'),
    '^irreversible call wire_money \(approval [0-9a-f-]{36}\) rejected by bob: amount too large$',
    'the session says which call was refused, by whom and why'
);
SET ROLE ul_t_agent;
SELECT results_eq(
    $$SELECT effect_id, action, state, approval_id FROM undolog.intercept(
        'b0000000-0000-4000-8000-000000000001', 0, 'wire_money', 'irreversible',
        '{"target": "wire_money"}',
        pg_temp.sig('b0000000-0000-4000-8000-000000000001' || 0 || 'wire_money'))$$,
    format($$VALUES (%L::uuid, 'rejected'::text, 'rejected'::text, %L::uuid)$$,
           :'effect_b', :'approval_b'),
    'the rejected call, made again, is answered rejected (it never runs)'
);
RESET ROLE;
SELECT is(
    (SELECT count(*)::int FROM undolog.undolog_effect_history
     WHERE effect_id = :'effect_b' AND to_state = 'executing'),
    0, 'the rejected call never executed'
);

SELECT pg_temp.journal_state() AS before \gset
SET ROLE ul_t_approver;
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, 'alice', NULL)$$, :'approval_b'),
    'UL014', NULL, 'approving a rejected request raises UL014'
);
SELECT throws_ok(
    format($$SELECT undolog.reject(%L, 'alice', NULL)$$, :'approval_b'),
    'UL014', NULL, 'rejecting a rejected request raises UL014'
);
RESET ROLE;
SELECT is(pg_temp.journal_state(), :'before', 'deciding a rejected request again changed nothing');

-- ---------------------------------------------------------------------------------------
-- Bad input: a clear error, nothing changed.
-- ---------------------------------------------------------------------------------------
SELECT pg_temp.gated_call('c0000000-0000-4000-8000-000000000001', 0, 'delete_account')
    AS approval_c \gset
SELECT pg_temp.journal_state() AS before \gset

SET ROLE ul_t_approver;
SELECT throws_ok(
    $$SELECT undolog.approve('00000000-0000-4000-8000-0000000000ff', 'alice')$$,
    'UL013', 'unknown approval 00000000-0000-4000-8000-0000000000ff',
    'approve of an unknown approval id raises UL013'
);
SELECT throws_ok(
    $$SELECT undolog.reject('00000000-0000-4000-8000-0000000000ff', 'alice')$$,
    'UL013', 'unknown approval 00000000-0000-4000-8000-0000000000ff',
    'reject of an unknown approval id raises UL013'
);
SELECT throws_ok(
    $$SELECT undolog.approve(NULL, 'alice')$$,
    'UL008', 'approval_id is required', 'approve without an approval id raises UL008'
);
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, NULL)$$, :'approval_c'),
    'UL008', 'decided_by must name who decides: non-blank text of at most 200 characters',
    'approve with a NULL decided_by raises UL008'
);
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, '')$$, :'approval_c'),
    'UL008', NULL, 'approve with an empty decided_by raises UL008'
);
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, E' \t ')$$, :'approval_c'),
    'UL008', NULL, 'approve with a blank decided_by raises UL008'
);
SELECT throws_ok(
    format($$SELECT undolog.reject(%L, '  ')$$, :'approval_c'),
    'UL008', NULL, 'reject with a blank decided_by raises UL008'
);
SELECT throws_ok(
    format($$SELECT undolog.reject(%L, NULL, 'no')$$, :'approval_c'),
    'UL008', NULL, 'reject with a NULL decided_by raises UL008'
);
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, repeat('x', 201))$$, :'approval_c'),
    'UL008', NULL, 'a decided_by over 200 characters raises UL008'
);
SELECT throws_ok(
    format($$SELECT undolog.reject(%L, 'alice', repeat('x', 8193))$$, :'approval_c'),
    'UL008', 'reason is 8193 characters, over the limit of 8192',
    'a reason over 8192 characters raises UL008'
);
RESET ROLE;

-- Approve and reject are the approver's: the agent (whose call it is) and the operator
-- cannot decide.
SET ROLE ul_t_agent;
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, 'the agent itself')$$, :'approval_c'),
    '42501', NULL, 'the agent role cannot approve (42501)'
);
SELECT throws_ok(
    format($$SELECT undolog.reject(%L, 'the agent itself')$$, :'approval_c'),
    '42501', NULL, 'the agent role cannot reject (42501)'
);
RESET ROLE;
SET ROLE ul_t_operator;
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, 'ops')$$, :'approval_c'),
    '42501', NULL, 'the operator role cannot approve (42501)'
);
RESET ROLE;
SELECT is(pg_temp.journal_state(), :'before', 'no refused call changed anything');
SELECT results_eq(
    $$SELECT a.state, e.state, s.state
      FROM undolog.undolog_approval_requests AS a
      JOIN undolog.undolog_effect_log AS e USING (session_id, effect_id, executed_at)
      JOIN undolog.undolog_sessions AS s USING (session_id)
      WHERE a.approval_id = '$$ || :'approval_c' || $$'$$,
    $$VALUES ('pending'::text, 'pending'::text, 'awaiting_approval'::text)$$,
    'the request is still pending and decidable after the refusals'
);
SET ROLE ul_t_approver;
SELECT is(undolog.approve(:'approval_c', 'carol'), 'approved',
          'a NULL reason is allowed: approve still works');
RESET ROLE;
SELECT is(
    (SELECT reason FROM undolog.undolog_approval_requests WHERE approval_id = :'approval_c'),
    NULL, 'no reason is recorded as NULL'
);

-- ---------------------------------------------------------------------------------------
-- Several pending requests in one session: a waiting session takes a new IRREVERSIBLE
-- call (it asks too), and returns to active only when none is left pending.
-- (53_ask_at_once.sql covers this from the agent's side.)
-- ---------------------------------------------------------------------------------------
CREATE FUNCTION pg_temp.second_request(p_session uuid, p_step integer, p_tool text)
RETURNS uuid LANGUAGE sql AS $$
    SELECT pg_temp.tool(p_tool, 'irreversible');
    SELECT i.approval_id
    FROM undolog.intercept(p_session, p_step, p_tool, 'irreversible',
                           jsonb_build_object('target', p_tool),
                           pg_temp.sig(p_session::text || p_step || p_tool)) AS i;
$$;

SELECT pg_temp.gated_call('d0000000-0000-4000-8000-000000000001', 0, 'payout_one')
    AS approval_d1 \gset
SELECT pg_temp.second_request('d0000000-0000-4000-8000-000000000001', 1, 'payout_two')
    AS approval_d2 \gset
SET ROLE ul_t_approver;
SELECT is(undolog.approve(:'approval_d1', 'alice'), 'approved', 'first of two approved');
RESET ROLE;
SELECT is(
    (SELECT state FROM undolog.undolog_sessions
     WHERE session_id = 'd0000000-0000-4000-8000-000000000001'),
    'awaiting_approval', 'one request still pending: the session keeps waiting'
);
SET ROLE ul_t_agent;
SELECT results_eq(
    $$SELECT action, approval_id FROM undolog.intercept(
        'd0000000-0000-4000-8000-000000000001', 0, 'payout_one', 'irreversible',
        '{"target": "payout_one"}',
        pg_temp.sig('d0000000-0000-4000-8000-000000000001' || 0 || 'payout_one'))$$,
    format($$VALUES ('await_approval'::text, %L::uuid)$$, :'approval_d2'),
    'the approved call does not run while the session still waits: it is told which '
    'request it waits for'
);
RESET ROLE;
SET ROLE ul_t_approver;
SELECT is(undolog.approve(:'approval_d2', 'alice'), 'approved', 'second of two approved');
RESET ROLE;
SELECT is(
    (SELECT state FROM undolog.undolog_sessions
     WHERE session_id = 'd0000000-0000-4000-8000-000000000001'),
    'active', 'none pending any more: the session is active'
);

SELECT pg_temp.gated_call('e0000000-0000-4000-8000-000000000001', 0, 'payout_one')
    AS approval_e1 \gset
SELECT pg_temp.second_request('e0000000-0000-4000-8000-000000000001', 1, 'payout_two')
    AS approval_e2 \gset
SET ROLE ul_t_approver;
SELECT is(undolog.reject(:'approval_e1', 'alice', 'no'), 'rejected', 'first of two rejected');
RESET ROLE;
SELECT is(
    (SELECT state FROM undolog.undolog_sessions
     WHERE session_id = 'e0000000-0000-4000-8000-000000000001'),
    'compensating', 'one rejection sends the session to its undo walk'
);
SELECT results_eq(
    format($$SELECT state, decided_by, reason, decided_at > now()
             FROM undolog.undolog_approval_requests WHERE approval_id = %L$$, :'approval_e2'),
    format($$VALUES ('rejected'::text, 'alice'::text,
                     'not decided on its own: approval ' || %L || ' (payout_one) was rejected, '
                     'which sent the session to its undo walk', true)$$, :'approval_e1'),
    'the other pending request is closed with it, by the same decider, saying why'
);
SELECT pg_temp.journal_state() AS before \gset
SET ROLE ul_t_approver;
SELECT throws_ok(
    format($$SELECT undolog.approve(%L, 'bob')$$, :'approval_e2'),
    'UL014', NULL, 'the closed request can no longer be approved'
);
RESET ROLE;
SELECT is(pg_temp.journal_state(), :'before', 'that refused approval changed nothing');
SELECT results_eq(
    $$SELECT s.state, e.state FROM undolog.undolog_sessions AS s
      JOIN undolog.undolog_effect_log AS e USING (session_id)
      WHERE s.session_id = 'e0000000-0000-4000-8000-000000000001' ORDER BY e.step_index$$,
    $$VALUES ('compensating'::text, 'rejected'::text), ('compensating', 'rejected')$$,
    'both calls rejected; the session stays compensating'
);

-- ---------------------------------------------------------------------------------------
-- The approval requests table guards itself, even against the owner's own writes.
-- ---------------------------------------------------------------------------------------
SELECT throws_ok(
    format($$UPDATE undolog.undolog_approval_requests SET state = 'rejected',
             decided_by = 'x', decided_at = now(), decided_role = 'x'
             WHERE approval_id = %L$$, :'approval_a'),
    'UL014', NULL, 'a decided request cannot be decided again, even by the owner'
);
SELECT throws_ok(
    format($$UPDATE undolog.undolog_approval_requests SET reason = 'rewritten'
             WHERE approval_id = %L$$, :'approval_a'),
    'UL014', NULL, 'a decided request''s reason cannot be rewritten'
);
SELECT pg_temp.gated_call('f0000000-0000-4000-8000-000000000001', 0, 'format_disk')
    AS approval_f \gset
SELECT throws_ok(
    format($$UPDATE undolog.undolog_approval_requests SET expires_at = now() + interval '1 day'
             WHERE approval_id = %L$$, :'approval_f'),
    'UL011', NULL, 'a request''s deadline cannot be moved'
);
SELECT throws_ok(
    format($$UPDATE undolog.undolog_approval_requests SET effect_id = gen_random_uuid()
             WHERE approval_id = %L$$, :'approval_f'),
    'UL011', NULL, 'a request''s effect cannot change'
);
SELECT throws_ok(
    format($$UPDATE undolog.undolog_approval_requests SET state = 'pending', reason = 'x'
             WHERE approval_id = %L$$, :'approval_f'),
    'UL001', NULL, 'a pending request changes only by being decided'
);
SELECT throws_ok(
    format($$UPDATE undolog.undolog_approval_requests SET state = 'approved'
             WHERE approval_id = %L$$, :'approval_f'),
    '23514', NULL, 'a decision without who and when violates the decision check'
);
SELECT throws_ok(
    format($$UPDATE undolog.undolog_approval_requests SET state = 'rejected',
             decided_at = now(), decided_role = session_user
             WHERE approval_id = %L$$, :'approval_f'),
    '23514', NULL, 'a human decision without decided_by violates the decision check'
);
SELECT throws_ok(
    format($$DELETE FROM undolog.undolog_approval_requests WHERE approval_id = %L$$,
           :'approval_f'),
    'UL011', NULL, 'approval requests cannot be deleted'
);
-- CASCADE: the notification deliveries reference the requests, so a plain TRUNCATE is
-- refused by that foreign key (0A000) before the table's own trigger is asked.
SELECT throws_ok(
    'TRUNCATE undolog.undolog_approval_requests CASCADE',
    'UL011', NULL, 'approval requests cannot be truncated'
);
SELECT throws_ok(
    $$INSERT INTO undolog.undolog_approval_requests
        (session_id, effect_id, executed_at, state, decided_at, decided_by, decided_role)
      VALUES ('f0000000-0000-4000-8000-000000000001', gen_random_uuid(), now(), 'approved',
              now(), 'x', 'x')$$,
    'UL001', NULL, 'a request cannot be born decided'
);
SELECT lives_ok(
    format($$UPDATE undolog.undolog_approval_requests SET state = state
             WHERE approval_id = %L$$, :'approval_f'),
    'a no-op update is harmless'
);
SELECT throws_ok(
    $$UPDATE undolog.undolog_sessions SET owner_role = 'someone_else'
      WHERE session_id = 'f0000000-0000-4000-8000-000000000001'$$,
    'UL011', 'a session''s identity (session_id, owner_role, created_at) cannot change',
    'a session''s owner cannot change'
);
SELECT is(
    (SELECT owner_role FROM undolog.undolog_sessions
     WHERE session_id = 'f0000000-0000-4000-8000-000000000001'),
    session_user::text, 'a session is owned by the login that began it'
);

-- ---------------------------------------------------------------------------------------
-- The views.
-- ---------------------------------------------------------------------------------------
SET ROLE ul_t_approver;
SELECT results_eq(
    $$SELECT approval_id, session_id, tool_name, args, step_index, age = interval '0',
             expires_at, expired, session_state
      FROM undolog.pending_approvals ORDER BY requested_at, approval_id$$,
    format($$VALUES (%L::uuid, 'f0000000-0000-4000-8000-000000000001'::uuid,
                     'format_disk'::text, '{"target": "format_disk"}'::jsonb, 0, true,
                     NULL::timestamptz, false, 'awaiting_approval'::text)$$,
           :'approval_f'),
    'pending_approvals lists the one request waiting, with its call, age and deadline'
);
SELECT results_eq(
    $$SELECT approval_id, tool_name, decision, decided_by, reason, effect_state
      FROM undolog.decided_approvals
      WHERE approval_id IN ('$$ || :'approval_a' || $$', '$$ || :'approval_b' || $$')
      ORDER BY decision$$,
    format($$VALUES (%L::uuid, 'drop_database'::text, 'approved'::text,
                     'alice@example.com'::text, 'checked the backup'::text, 'committed'::text),
                    (%L::uuid, 'wire_money', 'rejected', 'bob', 'amount too large',
                     'rejected')$$,
           :'approval_a', :'approval_b'),
    'decided_approvals lists decisions with who, why and what became of the call'
);
SELECT is(
    (SELECT count(*)::int FROM undolog.decided_approvals), 7,
    'decided_approvals has every decided request'
);
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
