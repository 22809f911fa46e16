-- Row-level security: an agent reads its own journal and nobody else's; approver and
-- operator read everything; the views are theirs only.
-- Ownership is the login role (session_user), so two agents are played here with SET
-- SESSION AUTHORIZATION (allowed to the superuser running the tests, rolled back with
-- them); SET ROLE would leave session_user unchanged.
BEGIN;
SELECT plan(38);

CREATE ROLE ul_t_agent_a NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_agent_b NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_operator NOLOGIN IN ROLE undolog_operator;
CREATE ROLE ul_t_nobody NOLOGIN;

CREATE FUNCTION pg_temp.sig(p_label text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT encode(sha256(convert_to(p_label, 'UTF8')), 'hex')
$$;

-- Agent A: a compensable call (committed, then replayed) and an irreversible one (awaiting
-- approval). A call's creation and commit are recorded in its own row (migration 0013);
-- the replay is a history row.
SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT undolog.register_tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT undolog.register_tool('drop_database', 'irreversible') AS tool_id \gset
SELECT undolog.begin_session('aaaaaaaa-0000-4000-8000-000000000001', 'agent-a');
SELECT effect_id AS effect_a1 FROM undolog.intercept(
    'aaaaaaaa-0000-4000-8000-000000000001', 0, 'create_user', 'compensable',
    '{"email": "a@example.com"}', pg_temp.sig('a-0'), '{"name": "delete_user"}') \gset
SELECT undolog.commit(:'effect_a1', '{"user_id": 1}');
SELECT action AS replay_a1 FROM undolog.intercept(
    'aaaaaaaa-0000-4000-8000-000000000001', 0, 'create_user', 'compensable',
    '{"email": "a@example.com"}', pg_temp.sig('a-0'), '{"name": "delete_user"}') \gset
SELECT approval_id AS approval_a FROM undolog.intercept(
    'aaaaaaaa-0000-4000-8000-000000000001', 1, 'drop_database', 'irreversible',
    '{"name": "prod"}', pg_temp.sig('a-1')) \gset
RESET SESSION AUTHORIZATION;

-- Agent B: one compensable call that failed once and was retried (two history rows),
-- executing again.
SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT undolog.register_tool('send_email', 'compensable', '{"name": "recall_email"}') AS tool_id \gset
SELECT undolog.begin_session('bbbbbbbb-0000-4000-8000-000000000001', 'agent-b');
SELECT effect_id AS effect_b1 FROM undolog.intercept(
    'bbbbbbbb-0000-4000-8000-000000000001', 0, 'send_email', 'compensable',
    '{"to": "b@example.com"}', pg_temp.sig('b-0'), '{"name": "recall_email"}') \gset
SELECT undolog.fail(:'effect_b1', 'smtp down');
SELECT action AS retry_b1 FROM undolog.intercept(
    'bbbbbbbb-0000-4000-8000-000000000001', 0, 'send_email', 'compensable',
    '{"to": "b@example.com"}', pg_temp.sig('b-0'), '{"name": "recall_email"}') \gset
RESET SESSION AUTHORIZATION;

SELECT is(:'replay_a1' || '/' || :'retry_b1', 'replay/execute',
          'setup: agent A''s call replayed, agent B''s executed again after its fail');

SELECT results_eq(
    $$SELECT session_id, owner_role FROM undolog.undolog_sessions
      WHERE session_id IN ('aaaaaaaa-0000-4000-8000-000000000001',
                           'bbbbbbbb-0000-4000-8000-000000000001') ORDER BY 1$$,
    $$VALUES ('aaaaaaaa-0000-4000-8000-000000000001'::uuid, 'ul_t_agent_a'::text),
             ('bbbbbbbb-0000-4000-8000-000000000001', 'ul_t_agent_b')$$,
    'each session is owned by the login that began it'
);

-- ---------------------------------------------------------------------------------------
-- What each agent reads.
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT results_eq(
    'SELECT session_id, state FROM undolog.undolog_sessions',
    $$VALUES ('aaaaaaaa-0000-4000-8000-000000000001'::uuid, 'awaiting_approval'::text)$$,
    'agent A reads its own session only'
);
SELECT results_eq(
    'SELECT tool_name, state FROM undolog.undolog_effect_log ORDER BY step_index',
    $$VALUES ('create_user'::text, 'committed'::text), ('drop_database', 'pending')$$,
    'agent A reads its own effects only'
);
SELECT is(
    (SELECT count(DISTINCT session_id)::int FROM undolog.undolog_effect_history), 1,
    'agent A reads the history of its own effects only'
);
SELECT is(
    (SELECT string_agg(event, ',') FROM undolog.undolog_effect_history), 'replayed',
    'and all of it: the replay (its creations and the commit are in its effect rows)'
);
-- The timeline synthesises the in-row events from the effect rows, which the policies
-- filter too (security_invoker). ORDER BY seq, at: the committed call's creation and commit
-- share its commit's one link (seq), the creation first by its time.
SELECT results_eq(
    $$SELECT session_id, tool_name, from_state, to_state FROM undolog.effect_timeline
      ORDER BY seq, at$$,
    $$VALUES ('aaaaaaaa-0000-4000-8000-000000000001'::uuid, 'create_user'::text, NULL::text,
              'executing'::text),
             ('aaaaaaaa-0000-4000-8000-000000000001', 'create_user', 'executing', 'committed'),
             ('aaaaaaaa-0000-4000-8000-000000000001', 'create_user', 'committed', 'committed'),
             ('aaaaaaaa-0000-4000-8000-000000000001', 'drop_database', NULL, 'pending')$$,
    'agent A reads the whole timeline of its own calls only'
);
SELECT is(
    (SELECT array_agg(DISTINCT session_id)::text FROM undolog.undolog_session_history),
    '{aaaaaaaa-0000-4000-8000-000000000001}', 'agent A reads its own session history only'
);
SELECT is(
    (SELECT count(*)::int FROM undolog.undolog_undo_stack), 2,
    'agent A reads its own undo stack (an entry and a barrier)'
);
SELECT results_eq(
    'SELECT approval_id, state FROM undolog.undolog_approval_requests',
    format($$VALUES (%L::uuid, 'pending'::text)$$, :'approval_a'),
    'agent A reads its own approval request'
);
SELECT is_empty(
    $$SELECT FROM undolog.undolog_effect_log
      WHERE session_id = 'bbbbbbbb-0000-4000-8000-000000000001'$$,
    'asking for agent B''s session by id finds nothing'
);
-- A call's signature is its undo entry's (migration 0014): the agent reads the signatures
-- of its own calls (the same facts it reads in its effect log), never another login's.
SELECT set_eq(
    'SELECT call_signature FROM undolog.undolog_undo_stack',
    format('VALUES (%L), (%L)', pg_temp.sig('a-0'), pg_temp.sig('a-1')),
    'agent A reads its own calls'' signatures in its undo entries'
);
SELECT is_empty(
    format('SELECT FROM undolog.undolog_undo_stack WHERE call_signature = %L OR session_id = %L',
           pg_temp.sig('b-0'), 'bbbbbbbb-0000-4000-8000-000000000001'),
    'agent A cannot read agent B''s undo entry nor its signature, even asking by them'
);
SELECT throws_ok('SELECT * FROM undolog.pending_approvals', '42501', NULL,
                 'the agent cannot read pending_approvals (a view is not filtered by RLS)');
SELECT throws_ok('SELECT * FROM undolog.decided_approvals', '42501', NULL,
                 'the agent cannot read decided_approvals');
SELECT throws_ok(
    format('SELECT * FROM %s', (SELECT c.oid::regclass FROM pg_class AS c
                                WHERE c.relispartition
                                  AND c.relname LIKE 'undolog\_effect\_log\_%'
                                ORDER BY c.relname LIMIT 1)),
    '42501', NULL, 'the agent cannot go around the policies by reading a partition'
);
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT results_eq(
    'SELECT session_id FROM undolog.undolog_sessions',
    $$VALUES ('bbbbbbbb-0000-4000-8000-000000000001'::uuid)$$,
    'agent B reads its own session only'
);
SELECT results_eq(
    'SELECT effect_id FROM undolog.undolog_effect_log',
    format('VALUES (%L::uuid)', :'effect_b1'),
    'agent B reads its own effect only'
);
SELECT is_empty(
    $$SELECT FROM undolog.undolog_effect_history
      WHERE session_id <> 'bbbbbbbb-0000-4000-8000-000000000001'$$,
    'agent B reads no other session''s effect history'
);
SELECT is_empty(
    $$SELECT FROM undolog.undolog_session_history
      WHERE session_id <> 'bbbbbbbb-0000-4000-8000-000000000001'$$,
    'agent B reads no other session''s history'
);
SELECT is_empty('SELECT FROM undolog.undolog_approval_requests',
                'agent B reads no approval request (it has none)');
SELECT is(
    (SELECT count(*)::int FROM undolog.undolog_undo_stack), 1,
    'agent B reads its own undo entry only'
);
-- The engine's functions run as the owner, whom RLS does not filter: B's calls work
-- as before, and they answer about B's own journal only.
SELECT lives_ok(format($$SELECT undolog.commit(%L, '{"sent": true}')$$, :'effect_b1'),
                'agent B still writes its journal through the engine''s functions');
RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------------------
-- Approver and operator read everything.
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_approver;
SELECT set_eq(
    $$SELECT session_id FROM undolog.undolog_sessions
      WHERE session_id IN ('aaaaaaaa-0000-4000-8000-000000000001',
                           'bbbbbbbb-0000-4000-8000-000000000001')$$,
    $$VALUES ('aaaaaaaa-0000-4000-8000-000000000001'::uuid),
             ('bbbbbbbb-0000-4000-8000-000000000001')$$,
    'the approver reads every agent''s sessions'
);
SELECT is(
    (SELECT count(*)::int FROM undolog.undolog_effect_log
     WHERE session_id IN ('aaaaaaaa-0000-4000-8000-000000000001',
                          'bbbbbbbb-0000-4000-8000-000000000001')),
    3, 'the approver reads every agent''s effects'
);
SELECT results_eq(
    $$SELECT approval_id, tool_name, args FROM undolog.pending_approvals
      WHERE session_id = 'aaaaaaaa-0000-4000-8000-000000000001'$$,
    format($$VALUES (%L::uuid, 'drop_database'::text, '{"name": "prod"}'::jsonb)$$,
           :'approval_a'),
    'the approver sees agent A''s request in pending_approvals'
);
SELECT is(undolog.approve(:'approval_a', 'alice'), 'approved', 'and approves it');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT results_eq(
    'SELECT state, decided_by FROM undolog.undolog_approval_requests',
    $$VALUES ('approved'::text, 'alice'::text)$$,
    'the waiting agent reads the decision on its request'
);
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_operator;
SELECT set_eq(
    $$SELECT call_signature FROM undolog.undolog_undo_stack
      WHERE session_id IN ('aaaaaaaa-0000-4000-8000-000000000001',
                           'bbbbbbbb-0000-4000-8000-000000000001')$$,
    format('VALUES (%L), (%L), (%L)', pg_temp.sig('a-0'), pg_temp.sig('a-1'), pg_temp.sig('b-0')),
    'the operator reads every agent''s call signatures'
);
SELECT is(
    (SELECT count(*)::int FROM undolog.decided_approvals WHERE approval_id = :'approval_a'),
    1, 'the operator reads decided_approvals'
);
SELECT is(
    (SELECT count(*)::int FROM undolog.undolog_undo_stack
     WHERE session_id IN ('aaaaaaaa-0000-4000-8000-000000000001',
                          'bbbbbbbb-0000-4000-8000-000000000001')),
    3, 'the operator reads every undo stack'
);
SELECT lives_ok('SELECT * FROM undolog.undolog_migrations',
                'the operator reads which migrations are installed');
RESET SESSION AUTHORIZATION;

-- A role in none of the groups reads nothing at all.
SET ROLE ul_t_nobody;
SELECT throws_ok('SELECT * FROM undolog.undolog_sessions', '42501', NULL,
                 'a role outside the groups cannot even reach the schema');
RESET ROLE;

-- Migration 0022's indexes. An agent's read policy compares owner_role with
-- session_user, a name, whose collation is "C": the owners' index is in "C", since one in
-- the column's collation would never serve the policy (an agent's sessions list read the
-- whole table). A few rows here: without enable_seqscan off the planner reads them all.
SELECT has_index('undolog', 'undolog_sessions', 'undolog_sessions_owner_idx',
                 'the sessions have an index by their owner');
SELECT has_index('undolog', 'undolog_sessions', 'undolog_sessions_id_end_idx',
                 'the session ids have an index by their end');
SELECT has_index('undolog', 'undolog_approval_requests', 'undolog_approval_requests_id_end_idx',
                 'the approval ids have an index by their end');
SELECT has_index('undolog', 'undolog_notification_deliveries',
                 'undolog_notification_deliveries_id_end_idx',
                 'the delivery ids have an index by their end');
CREATE FUNCTION pg_temp.plan_of(p_query text) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE 'EXPLAIN (COSTS OFF) ' || p_query;
END
$$;
SET SESSION AUTHORIZATION ul_t_agent_a;
SET enable_seqscan = off;
SELECT matches(
    (SELECT string_agg(p, E'\n') FROM pg_temp.plan_of('SELECT session_id FROM undolog.undolog_sessions') AS p),
    -- an index scan, or a bitmap one (as the table's dead rows left by earlier files decide)
    '(using|Bitmap Index Scan on) undolog_sessions_owner_idx( on undolog_sessions)?\s+Index Cond: \(owner_role = SESSION_USER\)',
    'an agent''s read policy is a range of the owners'' index'
);
RESET enable_seqscan;
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
