-- Append-only, enforced in the database: history tables, an effect's identity columns
-- (its recorded creation and commit among them), an undo entry's signature (the call's
-- exactly-once key) and the sessions table refuse UPDATE / DELETE / TRUNCATE (UL011),
-- even for the owner; TRUNCATE of a month partition directly too. Dropping or detaching a whole partition (DDL) still
-- works. No group role may write the tables.
BEGIN;
SELECT plan(108);
\ir _helpers.psql

-- The tools these calls name, registered as their author would (intercept refuses others).
SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT pg_temp.tool('send_email', 'irreversible') AS tool_id \gset

-- Data to protect: a committed compensable call and a pending irreversible one.
SELECT is(undolog.begin_session('a0000000-0000-4000-8000-000000000001'),
          'a0000000-0000-4000-8000-000000000001'::uuid, 'setup: a session');
SELECT is((SELECT action FROM undolog.intercept('a0000000-0000-4000-8000-000000000001', 0,
              'create_user', 'compensable', '{"name": "ada"}', pg_temp.sig('ao-c'),
              '{"name": "delete_user"}')),
          'execute', 'setup: a compensable call');
SELECT lives_ok(
    $$SELECT undolog.commit((SELECT effect_id FROM undolog.undolog_undo_stack
                             WHERE call_signature = pg_temp.sig('ao-c')), '{"id": 1}')$$,
    'setup: it commits');
SELECT is((SELECT action FROM undolog.intercept('a0000000-0000-4000-8000-000000000001', 1,
              'send_email', 'irreversible', '{"to": "ada"}', pg_temp.sig('ao-i'))),
          'await_approval', 'setup: an irreversible call');
-- A call's creation and commit are recorded in its own row (migration 0013): the effect
-- history gets rows from the other events, here a replay of the committed call.
SELECT is((SELECT action FROM undolog.intercept('a0000000-0000-4000-8000-000000000001', 0,
              'create_user', 'compensable', '{"name": "ada"}', pg_temp.sig('ao-c'),
              '{"name": "delete_user"}')),
          'replay', 'setup: the compensable call again: a replay');

CREATE TEMP TABLE month AS
SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM') AS this_month;
CREATE FUNCTION pg_temp.this_month(p_parent text) RETURNS text LANGUAGE sql
AS $$ SELECT 'undolog.' || p_parent || '_' || this_month FROM month $$;

SELECT results_eq(
    $$SELECT event, tableoid::regclass::text FROM undolog.undolog_effect_history$$,
    $$SELECT 'replayed', pg_temp.this_month('undolog_effect_history')$$,
    'setup: effect history has a row, the replay, in this month''s partition');
SELECT cmp_ok((SELECT count(*) FROM undolog.undolog_session_history), '>=', 2::bigint,
              'setup: session history has rows');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_stack), 2::bigint,
          'setup: the undo stack has 2 entries, one per call (its signature with it)');

-- Session history.
SELECT pg_temp.refused($$UPDATE undolog.undolog_session_history SET to_state = 'completed'$$,
                       'UL011', 'UPDATE of session history: UL011');
SELECT pg_temp.refused($$DELETE FROM undolog.undolog_session_history$$,
                       'UL011', 'DELETE of session history: UL011');
SELECT pg_temp.refused($$TRUNCATE undolog.undolog_session_history$$,
                       'UL011', 'TRUNCATE of session history: UL011');

-- Effect history: through the parent, and through its partitions directly.
SELECT pg_temp.refused($$UPDATE undolog.undolog_effect_history SET detail = '{}'$$,
                       'UL011', 'UPDATE of effect history: UL011');
SELECT pg_temp.refused($$DELETE FROM undolog.undolog_effect_history$$,
                       'UL011', 'DELETE of effect history: UL011');
SELECT pg_temp.refused($$TRUNCATE undolog.undolog_effect_history$$,
                       'UL011', 'TRUNCATE of effect history: UL011');
SELECT pg_temp.refused(format('UPDATE %s SET actor = %L', pg_temp.this_month('undolog_effect_history'), 'x'),
                       'UL011', 'UPDATE of this month''s effect history partition directly: UL011');
SELECT pg_temp.refused(format('DELETE FROM %s', pg_temp.this_month('undolog_effect_history')),
                       'UL011', 'DELETE from this month''s effect history partition directly: UL011');
SELECT pg_temp.refused(format('TRUNCATE %s', pg_temp.this_month('undolog_effect_history')),
                       'UL011', 'TRUNCATE of this month''s effect history partition directly: UL011');
SELECT pg_temp.refused($$TRUNCATE undolog.undolog_effect_history_default$$,
                       'UL011', 'TRUNCATE of the effect history default partition: UL011');

-- A call's exactly-once key, (session, signature), is its undo entry's (migration 0014):
-- the undo stack's guard refuses a changed signature, of a compensation's entry and of an
-- IRREVERSIBLE call's barrier alike. (The rest of the entry's guard: 47_undo_stack_guard.)
SELECT pg_temp.refused(format('UPDATE undolog.undolog_undo_stack SET call_signature = %L WHERE call_signature = %L',
                              pg_temp.sig('ao-other'), pg_temp.sig('ao-c')),
                       'UL011', 'UPDATE of a compensation entry''s signature: UL011');
SELECT pg_temp.refused(format('UPDATE undolog.undolog_undo_stack SET call_signature = %L WHERE call_signature = %L',
                              pg_temp.sig('ao-other'), pg_temp.sig('ao-i')),
                       'UL011', 'UPDATE of a barrier''s signature: UL011');
SELECT pg_temp.refused($$UPDATE undolog.undolog_undo_stack SET call_signature = md5(call_signature) || md5(call_signature)$$,
                       'UL011', 'UPDATE of every entry''s signature at once: UL011');

-- Effect log: identity columns, DELETE, TRUNCATE.
SELECT pg_temp.refused(format('UPDATE undolog.undolog_effect_log SET %s WHERE call_signature = %L',
                              assignment, pg_temp.sig('ao-c')),
                       'UL011', format('UPDATE of an effect''s %s: UL011', col))
FROM (VALUES
    ('effect_id', 'effect_id = gen_random_uuid()'),
    ('session_id', $q$session_id = 'a0000000-0000-4000-8000-000000000009'$q$),
    ('executed_at', $q$executed_at = executed_at + interval '1 second'$q$),
    ('call_signature', 'call_signature = repeat(''d'', 64)'),
    ('step_index', 'step_index = 5'),
    ('tool_name', 'tool_name = ''drop_db'''),
    ('tier', 'tier = ''irreversible'''),
    ('args', 'args = ''{"name": "eve"}'''),
    -- the recorded creation and commit (migration 0013), the result with the commit. This
    -- call committed before any other change: its one link is commit_*, chain_* is NULL
    -- and stays so (a creation link cannot be filled in afterwards; NULL + 1 would change
    -- nothing, so non-NULL values are set).
    ('events_in_row', 'events_in_row = false'),
    ('chain_seq', 'chain_seq = commit_seq'),
    ('chain_prev', 'chain_prev = commit_prev'),
    ('chain_hash', 'chain_hash = commit_hash'),
    ('committed_at', $q$committed_at = committed_at + interval '1 second'$q$),
    ('committed_by', 'committed_by = ''mallory'''),
    ('commit_seq', 'commit_seq = NULL'),
    ('commit_prev', 'commit_prev = NULL'),
    ('commit_hash', 'commit_hash = chain_hash'),
    ('result_snapshot', 'result_snapshot = ''{"id": 2}''')
) AS v (col, assignment);
-- The irreversible call was linked at its insert: its creation's link (chain_*) is as
-- fixed as the rest.
SELECT pg_temp.refused(format('UPDATE undolog.undolog_effect_log SET %s WHERE call_signature = %L',
                              assignment, pg_temp.sig('ao-i')),
                       'UL011', format('UPDATE of a linked creation''s %s: UL011', col))
FROM (VALUES
    ('chain_seq', 'chain_seq = chain_seq + 1'),
    ('chain_prev', 'chain_prev = chain_hash'),
    ('chain_hash', $q$chain_hash = '\x00'::bytea$q$),
    ('events_in_row', 'events_in_row = false')
) AS v (col, assignment);
SELECT pg_temp.refused(format('UPDATE %s SET tool_name = %L', pg_temp.this_month('undolog_effect_log'), 'x'),
                       'UL011', 'UPDATE of an identity column through this month''s partition: UL011');
SELECT pg_temp.refused($$DELETE FROM undolog.undolog_effect_log$$,
                       'UL011', 'DELETE of the effect log: UL011');
SELECT pg_temp.refused(format('DELETE FROM %s', pg_temp.this_month('undolog_effect_log')),
                       'UL011', 'DELETE from this month''s effect log partition directly: UL011');
SELECT pg_temp.refused($$TRUNCATE undolog.undolog_effect_log$$,
                       'UL011', 'TRUNCATE of the effect log: UL011');
SELECT pg_temp.refused(format('TRUNCATE %s', pg_temp.this_month('undolog_effect_log')),
                       'UL011', 'TRUNCATE of this month''s effect log partition directly: UL011');
SELECT pg_temp.refused($$TRUNCATE undolog.undolog_effect_log_default$$,
                       'UL011', 'TRUNCATE of the effect log default partition: UL011');

-- Sessions: rows change state, but never vanish, and keep their identity.
SELECT pg_temp.refused($$DELETE FROM undolog.undolog_sessions$$,
                       'UL011', 'DELETE of a session: UL011');
SELECT pg_temp.refused($$TRUNCATE undolog.undolog_sessions$$,
                       'UL011', 'TRUNCATE of sessions: UL011');
SELECT pg_temp.refused($$UPDATE undolog.undolog_sessions SET session_id = gen_random_uuid()$$,
                       'UL011', 'UPDATE of a session''s id: UL011');
SELECT pg_temp.refused($$UPDATE undolog.undolog_sessions SET created_at = created_at - interval '1 day'$$,
                       'UL011', 'UPDATE of a session''s created_at: UL011');

-- Partitions created later carry the same protection.
SELECT cmp_ok((SELECT count(*) FROM undolog.ensure_partitions(3)), '>', 0::bigint,
              'setup: ensure_partitions(3) creates months ahead');
CREATE TEMP TABLE later AS
SELECT to_char(date_trunc('month', now() AT TIME ZONE 'UTC') + interval '3 months', 'YYYY_MM') AS m3,
       to_char(date_trunc('month', now() AT TIME ZONE 'UTC') + interval '2 months', 'YYYY_MM') AS m2;
SELECT pg_temp.refused(format('TRUNCATE undolog.undolog_effect_log_%s', m3), 'UL011',
                       'TRUNCATE of a newly created effect log month: UL011') FROM later;
SELECT pg_temp.refused(format('TRUNCATE undolog.undolog_effect_history_%s', m3), 'UL011',
                       'TRUNCATE of a newly created effect history month: UL011') FROM later;

-- Dropping and detaching whole months is DDL and still works.
SELECT lives_ok(format('DROP TABLE undolog.undolog_effect_log_%1$s, undolog.undolog_effect_history_%1$s', m3),
                'dropping a month of effect log and history works') FROM later;
SELECT lives_ok(format('ALTER TABLE undolog.undolog_effect_log DETACH PARTITION undolog.undolog_effect_log_%s', m2),
                'detaching a month of the effect log works') FROM later;
SELECT hasnt_table('undolog', 'undolog_effect_log_' || m3, 'the dropped month is gone') FROM later;

-- Grants: PUBLIC and the group roles cannot write any undolog table directly.
SELECT is_empty(
    $$SELECT c.oid::regclass, r.rolname, p.priv
      FROM pg_class AS c
      JOIN pg_namespace AS n ON n.oid = c.relnamespace
      CROSS JOIN pg_roles AS r
      CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p (priv)
      WHERE n.nspname = 'undolog' AND c.relkind IN ('r', 'p')
        AND r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND has_table_privilege(r.oid, c.oid, p.priv)$$,
    'no group role may INSERT, UPDATE, DELETE or TRUNCATE an undolog table');
SELECT is_empty(
    $$SELECT c.oid::regclass, a.privilege_type
      FROM pg_class AS c
      JOIN pg_namespace AS n ON n.oid = c.relnamespace
      CROSS JOIN LATERAL aclexplode(c.relacl) AS a
      WHERE n.nspname = 'undolog' AND c.relkind IN ('r', 'p') AND a.grantee = 0$$,
    'PUBLIC holds no privilege on any undolog table');

SELECT * FROM finish();
ROLLBACK;
