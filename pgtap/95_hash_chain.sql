-- The history's hash chains: every history row is linked into its session's chain as
-- it is written (seq 1, 2, ...; hash = sha256(prev || canonical record)); so are a new
-- call's creation and commit, recorded in its own effect row (migration 0013: a
-- COMPENSABLE call that commits before any other change has one link, its commit's,
-- whose record is the whole call; one still executing since its intercept has none); an
-- unchanged journal verifies clean; rows changed, deleted, reordered or slipped in with
-- the triggers off are named by verify_chain (and assert_chain raises UL027); an approval
-- request is linked when made and when decided, and its links cannot be written by an
-- UPDATE; anchors chain the heads and catch a consistent rewrite; a range of sessions
-- (p_after_session, p_through_session) is verified on its own, and the ranges one after
-- the other answer what the whole run does, the anchors' own chain in the range open at
-- its top only; chain_events without records answers the same rows; staff only.
BEGIN;
SELECT plan(70);
\ir _helpers.psql

SELECT pg_temp.tool('create_user', 'compensable', '{"name": "delete_user"}') AS tool_id \gset
SELECT pg_temp.tool('send_email', 'irreversible') AS tool_id \gset

SELECT is(undolog.begin_session('c0000000-0000-4000-8000-000000000001'),
          'c0000000-0000-4000-8000-000000000001'::uuid, 'setup: a session');
SELECT is((SELECT action FROM undolog.intercept('c0000000-0000-4000-8000-000000000001', 0,
              'create_user', 'compensable', '{"name": "ada"}', pg_temp.sig('hc-c'),
              '{"name": "delete_user"}')),
          'execute', 'setup: a compensable call');
SELECT lives_ok(
    $$SELECT undolog.commit((SELECT effect_id FROM undolog.undolog_undo_stack
                             WHERE call_signature = pg_temp.sig('hc-c')), '{"id": 1}')$$,
    'setup: it commits');
SELECT is((SELECT action FROM undolog.intercept('c0000000-0000-4000-8000-000000000001', 0,
              'create_user', 'compensable', '{"name": "ada"}', pg_temp.sig('hc-c'),
              '{"name": "delete_user"}')),
          'replay', 'setup: the same call again, a replay (an effect history row)');
SELECT is((SELECT action FROM undolog.intercept('c0000000-0000-4000-8000-000000000001', 1,
              'send_email', 'irreversible', '{"to": "ada"}', pg_temp.sig('hc-i'))),
          'await_approval', 'setup: an irreversible call');
SELECT is(undolog.begin_session('c0000000-0000-4000-8000-000000000002'),
          'c0000000-0000-4000-8000-000000000002'::uuid, 'setup: another session');

SELECT effect_id AS hc_c FROM undolog.undolog_undo_stack
WHERE call_signature = pg_temp.sig('hc-c') \gset
SELECT effect_id AS hc_i FROM undolog.undolog_undo_stack
WHERE call_signature = pg_temp.sig('hc-i') \gset

CREATE TEMP VIEW chain1 AS
SELECT * FROM undolog.chain_events('c0000000-0000-4000-8000-000000000001');

-- Linked as written: the session's start, the compensable call's commit (one link for its
-- creation and its commit), its replay, the irreversible call's creation (linked at its
-- insert), its approval request, the session's wait.
SELECT is((SELECT array_agg(seq ORDER BY seq) FROM chain1), ARRAY[1, 2, 3, 4, 5, 6]::bigint[],
          'the session''s six links are 1 to 6');
SELECT is((SELECT array_agg(DISTINCT table_name ORDER BY table_name) FROM chain1),
          ARRAY['undolog_approval_requests', 'undolog_effect_history', 'undolog_effect_log',
                'undolog_session_history'],
          'of four tables');
SELECT results_eq(
    $$SELECT seq, table_name, row_key FROM chain1 WHERE table_name = 'undolog_effect_log'
      ORDER BY seq$$,
    format($$VALUES (2::bigint, 'undolog_effect_log', 'effect_id=%1$s committed'),
                    (4, 'undolog_effect_log', 'effect_id=%2$s created')$$, :'hc_c', :'hc_i'),
    'in the rows: the committed call''s one link is its commit, the pending one''s its creation');
SELECT results_eq(
    format($$SELECT effect_id, chain_seq, commit_seq FROM undolog.undolog_effect_log
             WHERE effect_id IN (%L, %L) ORDER BY coalesce(chain_seq, commit_seq)$$,
           :'hc_c', :'hc_i'),
    format($$VALUES (%L::uuid, NULL::bigint, 2::bigint), (%L::uuid, 4::bigint, NULL::bigint)$$,
           :'hc_c', :'hc_i'),
    '... stored in the row: the committed call has no chain_seq, the pending one no commit_seq');
SELECT is((SELECT count(*) FROM chain1 AS c
           WHERE c.hash <> sha256(c.prev || convert_to(c.canonical, 'UTF8'))), 0::bigint,
          'each hash is sha256(prev || canonical record)');
SELECT is((SELECT prev FROM chain1 WHERE seq = 1), undolog.chain_genesis(),
          'the first link follows 32 zero bytes');
SELECT is((SELECT count(*) FROM chain1 AS a JOIN chain1 AS b ON b.seq = a.seq + 1
           WHERE b.prev <> a.hash), 0::bigint, 'each prev is the previous hash');
SELECT is((SELECT (h.seq, h.head) FROM undolog.undolog_chain_heads AS h
           WHERE h.session_id = 'c0000000-0000-4000-8000-000000000001'),
          (SELECT (c.seq, c.hash) FROM chain1 AS c WHERE c.seq = 6),
          'the head is the last link');
SELECT is((SELECT max(seq) FROM undolog.chain_events('c0000000-0000-4000-8000-000000000002')),
          1::bigint, 'the other session has a chain of its own');
SELECT is_empty('SELECT * FROM undolog.verify_chain()', 'an unchanged journal verifies clean');
SELECT is_empty($$SELECT * FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000001')$$,
                'verify_chain of the untouched session, its in-row links included: nothing');
SELECT is(undolog.assert_chain(), 2::bigint, 'assert_chain: two sessions verified');

-- The canonical record does not depend on the session's settings.
CREATE TEMP TABLE records AS SELECT seq, canonical FROM chain1;
SET LOCAL TimeZone = 'America/St_Johns';
SET LOCAL DateStyle = 'German';
SELECT is((SELECT count(*) FROM chain1 JOIN records USING (seq, canonical)), 6::bigint,
          'the same records under another TimeZone and DateStyle');
RESET TimeZone;
RESET DateStyle;

-- What a caller writes into the chain columns is replaced.
INSERT INTO undolog.undolog_session_history (session_id, from_state, to_state, chain_seq,
                                             chain_hash)
VALUES ('c0000000-0000-4000-8000-000000000002', 'active', 'active', 42, '\x00');
SELECT is((SELECT array_agg(chain_seq ORDER BY chain_seq) FROM undolog.undolog_session_history
           WHERE session_id = 'c0000000-0000-4000-8000-000000000002'), ARRAY[1, 2]::bigint[],
          'a forged chain_seq is replaced by the next link');

-- An approval request: linked when made, again when decided; its links are identity.
SELECT throws_ok(
    $$UPDATE undolog.undolog_approval_requests SET chain_hash = '\x00'
      WHERE session_id = 'c0000000-0000-4000-8000-000000000001'$$,
    'UL011', NULL, 'an UPDATE cannot change a request''s link');
UPDATE undolog.undolog_approval_requests
SET state = 'expired', decided_at = now(), decided_role = 'pgtap'
WHERE session_id = 'c0000000-0000-4000-8000-000000000001';
SELECT is((SELECT decision_seq FROM undolog.undolog_approval_requests
           WHERE session_id = 'c0000000-0000-4000-8000-000000000001'), 7::bigint,
          'the decision is the next link');
SELECT is_empty('SELECT * FROM undolog.verify_chain()', 'still clean after the decision');

-- Anchors.
SELECT is((SELECT sessions FROM undolog.write_anchor()), 2, 'the first anchor: two heads');
SELECT is((SELECT sessions FROM undolog.write_anchor()), 0, 'the next: none moved since');
SELECT is((SELECT prev FROM undolog.undolog_chain_anchors WHERE anchor_id = 2),
          (SELECT anchor_hash FROM undolog.undolog_chain_anchors WHERE anchor_id = 1),
          'anchors are chained');

-- Tampering, as a superuser with every trigger off (each undone after its test).
SET LOCAL session_replication_role = replica;
SAVEPOINT t;
UPDATE undolog.undolog_effect_history SET to_state = 'failed'
WHERE session_id = 'c0000000-0000-4000-8000-000000000001' AND event = 'replayed';
SELECT results_eq(
    $$SELECT table_name, problem FROM undolog.verify_chain()$$,
    $$VALUES ('undolog_effect_history', 'altered')$$,
    'a changed row is named');
SELECT throws_ok('SELECT undolog.assert_chain()', 'UL027', NULL, 'assert_chain raises UL027');
ROLLBACK TO t;
-- An effect row's recorded creation and commit are checked as its history rows are. The
-- committed call's one link, its commit, records the whole call: its args too.
UPDATE undolog.undolog_effect_log SET args = '{"name": "eve"}' WHERE effect_id = :'hc_c';
SELECT results_eq(
    $$SELECT seq, table_name, row_key, problem
      FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000001')$$,
    format($$VALUES (2::bigint, 'undolog_effect_log', 'effect_id=%s committed', 'altered')$$,
           :'hc_c'),
    'changed args of a committed call: its commit (its one link) is named altered');
ROLLBACK TO t;
UPDATE undolog.undolog_effect_log SET args = '{"to": "eve"}' WHERE effect_id = :'hc_i';
SELECT results_eq(
    $$SELECT seq, table_name, row_key, problem
      FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000001')$$,
    format($$VALUES (4::bigint, 'undolog_effect_log', 'effect_id=%s created', 'altered')$$,
           :'hc_i'),
    'changed args of a pending irreversible call: its creation is named altered');
ROLLBACK TO t;
UPDATE undolog.undolog_effect_log SET result_snapshot = '{"id": 2}' WHERE effect_id = :'hc_c';
SELECT results_eq(
    $$SELECT seq, table_name, row_key, problem
      FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000001')$$,
    format($$VALUES (2::bigint, 'undolog_effect_log', 'effect_id=%s committed', 'altered')$$,
           :'hc_c'),
    'a changed result of a committed call: its commit is named altered');
ROLLBACK TO t;
UPDATE undolog.undolog_effect_log SET commit_seq = NULL, commit_prev = NULL, commit_hash = NULL
WHERE effect_id = :'hc_c';
-- (and the link after it, the replay at seq 3, no longer follows seq 1)
SELECT results_eq(
    $$SELECT seq, table_name, CASE WHEN seq IS NULL THEN row_key END, problem
      FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000001')
      ORDER BY seq NULLS FIRST, problem$$,
    format($$VALUES (NULL::bigint, 'undolog_effect_log', 'effect_id=%s committed', 'unchained'),
                    (3, 'undolog_effect_history', NULL, 'link'),
                    (3, 'undolog_effect_history', NULL, 'missing')$$, :'hc_c'),
    'a commit whose link was cleared (committed_at kept) is named unchained');
ROLLBACK TO t;
DELETE FROM undolog.undolog_session_history
WHERE session_id = 'c0000000-0000-4000-8000-000000000001' AND to_state = 'awaiting_approval';
SELECT results_eq(
    $$SELECT problem FROM undolog.verify_chain()$$,
    $$VALUES ('missing'), ('link')$$,
    'a deleted row: the next one is missing its predecessor');
ROLLBACK TO t;
UPDATE undolog.undolog_session_history SET chain_seq = 3 - chain_seq
WHERE session_id = 'c0000000-0000-4000-8000-000000000002' AND chain_seq IN (1, 2);
SELECT ok((SELECT bool_or(problem = 'link') FROM undolog.verify_chain(
              'c0000000-0000-4000-8000-000000000002')), 'reordered rows break the links');
ROLLBACK TO t;
INSERT INTO undolog.undolog_operator_actions (session_id, action, performed_by)
VALUES ('c0000000-0000-4000-8000-000000000002', 'abandon', 'mallory');
SELECT results_eq($$SELECT problem FROM undolog.verify_chain()$$, $$VALUES ('unchained')$$,
                  'a row slipped in behind the trigger is unchained');
SELECT results_eq(
    $$SELECT session_id, seq, prev, hash, table_name, row_key, at, canonical IS NULL
      FROM undolog.chain_events(p_records => false) ORDER BY session_id, table_name, row_key$$,
    $$SELECT session_id, seq, prev, hash, table_name, row_key, at, true
      FROM undolog.chain_events() ORDER BY session_id, table_name, row_key$$,
    'chain_events without records (p_records false): the same rows, the unchained one too');
ROLLBACK TO t;
SET LOCAL session_replication_role = origin;

-- A COMPENSABLE call in flight (executing since its intercept) has no link yet: its
-- session verifies clean, chain_events does not list it.
SELECT is(undolog.begin_session('c0000000-0000-4000-8000-000000000003'),
          'c0000000-0000-4000-8000-000000000003'::uuid, 'setup: a third session');
SELECT effect_id AS hc_f FROM undolog.intercept('c0000000-0000-4000-8000-000000000003', 0,
    'create_user', 'compensable', '{"name": "fay"}', pg_temp.sig('hc-f'),
    '{"name": "delete_user"}') \gset
SELECT is_empty($$SELECT * FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000003')$$,
                'a session with an in-flight call verifies clean');
SELECT is_empty(
    format($$SELECT * FROM undolog.chain_events('c0000000-0000-4000-8000-000000000003')
             WHERE row_key LIKE %L$$, 'effect_id=' || :'hc_f' || '%'),
    '... chain_events does not list the in-flight call');
-- Committed, it has exactly one link, its commit, whose record is the whole call: the
-- call's args with the commit and its result.
SELECT lives_ok(format($$SELECT undolog.commit(%L, '{"id": 3}')$$, :'hc_f'), 'setup: it commits');
SELECT is_empty($$SELECT * FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000003')$$,
                'after its commit the session verifies clean');
SELECT results_eq(
    format($$SELECT row_key, seq FROM undolog.chain_events('c0000000-0000-4000-8000-000000000003')
             WHERE row_key LIKE %L$$, 'effect_id=' || :'hc_f' || '%'),
    format($$SELECT 'effect_id=' || %L || ' committed', commit_seq
             FROM undolog.undolog_effect_log WHERE effect_id = %L$$, :'hc_f', :'hc_f'),
    '... chain_events lists exactly one link for the call: ''... committed'', at its commit_seq');
SELECT results_eq(
    format($$SELECT c.canonical::jsonb ->> 'event', c.canonical::jsonb -> 'args',
                    c.canonical::jsonb -> 'result', c.canonical::jsonb ->> 'tool_name',
                    c.canonical::jsonb ->> 'tier', c.canonical::jsonb ->> 'call_signature',
                    c.canonical::jsonb ->> 'committed_by' = session_user
             FROM undolog.chain_events('c0000000-0000-4000-8000-000000000003') AS c
             WHERE c.row_key = 'effect_id=' || %L || ' committed'$$, :'hc_f'),
    $$VALUES ('committed', '{"name": "fay"}'::jsonb, '{"id": 3}'::jsonb, 'create_user',
              'compensable', pg_temp.sig('hc-f'), true)$$,
    '... its canonical record: the call (args, tool, tier, signature), its commit and result');
SET LOCAL session_replication_role = replica;
SAVEPOINT t3;
UPDATE undolog.undolog_effect_log SET args = '{"name": "eve"}' WHERE effect_id = :'hc_f';
SELECT results_eq(
    $$SELECT table_name, row_key, problem
      FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000003')$$,
    format($$VALUES ('undolog_effect_log', 'effect_id=%s committed', 'altered')$$, :'hc_f'),
    'its args changed behind the trigger: its commit is named altered');
ROLLBACK TO t3;
SET LOCAL session_replication_role = origin;

-- A call whose first change is not its commit links its creation then: one the walk takes
-- while executing (executing -> compensating) has its creation linked right before the
-- claim's history row.
SELECT is(undolog.begin_session('c0000000-0000-4000-8000-000000000004'),
          'c0000000-0000-4000-8000-000000000004'::uuid, 'setup: a fourth session');
SELECT effect_id AS hc_w FROM undolog.intercept('c0000000-0000-4000-8000-000000000004', 0,
    'create_user', 'compensable', '{"name": "walt"}', pg_temp.sig('hc-w'),
    '{"name": "delete_user"}') \gset
SELECT is(undolog.fail_session('c0000000-0000-4000-8000-000000000004', 'died mid-call'), 'failed',
          'setup: its session fails with the call still executing');
SELECT is((SELECT effect_id
           FROM undolog.claim_compensation('c0000000-0000-4000-8000-000000000004')),
          :'hc_w'::uuid, 'setup: the walk takes the executing call');
SELECT results_eq(
    format($$SELECT e.state, e.chain_seq + 1 = h.chain_seq, e.commit_seq IS NULL
             FROM undolog.undolog_effect_log AS e
             JOIN undolog.undolog_effect_history AS h USING (session_id, effect_id, executed_at)
             WHERE e.effect_id = %L
               AND (h.from_state, h.to_state) = ('executing', 'compensating')$$, :'hc_w'),
    $$VALUES ('compensating', true, true)$$,
    'a call the walk took while executing: its creation linked, then the history row, next link');
SELECT is_empty($$SELECT * FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000004')$$,
                '... and its session verifies clean');

-- A failed call (pending again, its creation linked by the fail) whose creation link is
-- cleared behind the trigger is named unchained (and the fail's history row after it no
-- longer follows its predecessor).
SELECT effect_id AS hc_x FROM undolog.intercept('c0000000-0000-4000-8000-000000000003', 1,
    'create_user', 'compensable', '{"name": "xia"}', pg_temp.sig('hc-x'),
    '{"name": "delete_user"}') \gset
SELECT lives_ok(format($$SELECT undolog.fail(%L, 'boom')$$, :'hc_x'), 'setup: a call that fails');
SELECT results_eq(
    format($$SELECT state, events_in_row, chain_seq IS NOT NULL FROM undolog.undolog_effect_log
             WHERE effect_id = %L$$, :'hc_x'),
    $$VALUES ('pending', true, true)$$,
    'setup: it is pending, events_in_row, its creation linked');
SELECT is_empty($$SELECT * FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000003')$$,
                '... and the session verifies clean');
SET LOCAL session_replication_role = replica;
SAVEPOINT t4;
UPDATE undolog.undolog_effect_log SET chain_seq = NULL, chain_prev = NULL, chain_hash = NULL
WHERE effect_id = :'hc_x';
SELECT results_eq(
    $$SELECT seq IS NULL, table_name, CASE WHEN seq IS NULL THEN row_key END, problem
      FROM undolog.verify_chain('c0000000-0000-4000-8000-000000000003')
      ORDER BY seq NULLS FIRST, problem$$,
    format($$VALUES (true, 'undolog_effect_log', 'effect_id=%s created', 'unchained'),
                    (false, 'undolog_effect_history', NULL, 'link'),
                    (false, 'undolog_effect_history', NULL, 'missing')$$, :'hc_x'),
    'its creation link cleared: the creation is named unchained');
ROLLBACK TO t4;
SET LOCAL session_replication_role = origin;

-- A range of sessions: p_after_session < session_id <= p_through_session, a NULL bound
-- none on that side. Four sessions, c...1 to c...4, in id order.
SELECT is((SELECT array_agg(DISTINCT session_id ORDER BY session_id)
           FROM undolog.chain_events(NULL, NULL, 'c0000000-0000-4000-8000-000000000001',
                                     'c0000000-0000-4000-8000-000000000003')),
          ARRAY['c0000000-0000-4000-8000-000000000002',
                'c0000000-0000-4000-8000-000000000003']::uuid[],
          'chain_events of a range: the sessions after the first bound, through the second');
CREATE TEMP TABLE ranges (n, after_session, through_session) AS
VALUES (1, NULL::uuid, 'c0000000-0000-4000-8000-000000000001'::uuid),
       (2, 'c0000000-0000-4000-8000-000000000001', 'c0000000-0000-4000-8000-000000000002'),
       (3, 'c0000000-0000-4000-8000-000000000002', 'c0000000-0000-4000-8000-000000000004'),
       (4, 'c0000000-0000-4000-8000-000000000004', NULL);
CREATE TEMP VIEW ranged AS
SELECT f.session_id, f.seq, f.table_name, f.row_key, f.problem, f.expected, f.found
FROM ranges AS r,
     LATERAL undolog.verify_chain(NULL, NULL, r.after_session, r.through_session)
         WITH ORDINALITY AS f (session_id, seq, table_name, row_key, problem, expected, found, k)
ORDER BY r.n, f.k;
SELECT is_empty('SELECT * FROM ranged', 'every range of the clean journal verifies clean');
-- Tampered in three sessions and in the anchors' chain: each range names its own.
SET LOCAL session_replication_role = replica;
SAVEPOINT t5;
UPDATE undolog.undolog_effect_history SET to_state = 'failed'
WHERE session_id = 'c0000000-0000-4000-8000-000000000001' AND event = 'replayed';
UPDATE undolog.undolog_chain_heads SET seq = 99
WHERE session_id = 'c0000000-0000-4000-8000-000000000002';
UPDATE undolog.undolog_effect_log SET result_snapshot = '{"x": 1}' WHERE effect_id = :'hc_x';
UPDATE undolog.undolog_chain_anchors SET prev = '\x00' WHERE anchor_id = 2;
SELECT results_eq('SELECT * FROM ranged', 'SELECT * FROM undolog.verify_chain()',
                  'the ranges one after the other: the whole run''s findings, in its order');
SELECT results_eq(
    $$SELECT session_id, problem FROM undolog.verify_chain(NULL, NULL,
          'c0000000-0000-4000-8000-000000000001', 'c0000000-0000-4000-8000-000000000002')$$,
    $$VALUES ('c0000000-0000-4000-8000-000000000002'::uuid, 'head')$$,
    'a range names its own sessions'' findings only: the changed head');
SELECT results_eq(
    $$SELECT session_id, table_name, problem FROM undolog.verify_chain(NULL, NULL,
          'c0000000-0000-4000-8000-000000000002', 'c0000000-0000-4000-8000-000000000004')$$,
    $$VALUES ('c0000000-0000-4000-8000-000000000003'::uuid, 'undolog_effect_log', 'impossible')$$,
    '... the impossible row of its session (chain_impossible_rows of the range)');
SELECT is_empty(
    $$SELECT * FROM undolog.verify_chain(NULL, NULL, NULL, 'c0000000-0000-4000-8000-000000000004')
      WHERE session_id IS NULL$$,
    'a range closed at its top does not check the anchors'' own chain');
SELECT results_eq(
    $$SELECT table_name, problem FROM undolog.verify_chain(NULL, NULL,
          'c0000000-0000-4000-8000-000000000004', NULL) ORDER BY problem$$,
    $$VALUES ('undolog_chain_anchors', 'altered'), ('undolog_chain_anchors', 'link')$$,
    'the range open at its top does, once: the changed anchor');
SELECT is(
    (SELECT count(*) FROM undolog.chain_impossible_rows(NULL, NULL,
         'c0000000-0000-4000-8000-000000000003', NULL)),
    0::bigint, 'chain_impossible_rows of a range without the row: none');
SELECT is(
    (SELECT count(*) FROM undolog.chain_impossible_rows(NULL, NULL, NULL,
         'c0000000-0000-4000-8000-000000000003')),
    1::bigint, '... of a range with it: the row');
ROLLBACK TO t5;
SET LOCAL session_replication_role = origin;

-- An anchor's heads rewritten to what no anchor holds (a seq that is not a whole number,
-- a key that is no session id, a head that is not hex, heads that are no object): the
-- anchor is named altered, as any other change of it, and each malformed head anchored,
-- with what it holds. The casts made verify_chain raise instead (22P02, 22023), so that
-- the owner's tampering read as a verification that could not finish (exit 1), not a
-- verdict. A run in ranges of sessions answers what the whole run does.
-- What a run finds, and what it must find, when one head of session ...0001 is malformed.
PREPARE malformed_findings AS
SELECT session_id::text, problem, found LIKE 'malformed: %'
FROM undolog.verify_chain() ORDER BY problem;
PREPARE one_malformed_head AS
VALUES (NULL, 'altered', false), ('c0000000-0000-4000-8000-000000000001', 'anchored', true);
SET LOCAL session_replication_role = replica;
SAVEPOINT t6;
UPDATE undolog.undolog_chain_anchors
SET heads = jsonb_set(heads, ARRAY['c0000000-0000-4000-8000-000000000001', '0'], '"1.0"')
WHERE anchor_id = 1;
SELECT results_eq(
    'malformed_findings', 'one_malformed_head',
    'a head''s seq that is no whole number: the head is malformed, the anchor altered, no error');
ROLLBACK TO t6;
UPDATE undolog.undolog_chain_anchors
SET heads = heads - 'c0000000-0000-4000-8000-000000000001'
            || jsonb_build_object('not a session', heads -> 'c0000000-0000-4000-8000-000000000001')
WHERE anchor_id = 1;
SELECT results_eq(
    $$SELECT session_id::text, problem, found LIKE 'malformed: "not a session": %'
      FROM undolog.verify_chain() ORDER BY problem$$,
    $$VALUES (NULL::text, 'altered', false), (NULL, 'anchored', true)$$,
    'a key that is no session id: the head is malformed, the anchor altered, no error');
SELECT results_eq(
    $$SELECT v.session_id, v.problem, v.found
      FROM (SELECT * FROM undolog.verify_chain(NULL, NULL, NULL,
                                               'c0000000-0000-4000-8000-000000000001')
            UNION ALL
            SELECT * FROM undolog.verify_chain(NULL, NULL,
                                               'c0000000-0000-4000-8000-000000000001', NULL))
           AS v ORDER BY v.problem, v.found$$,
    $$SELECT v.session_id, v.problem, v.found FROM undolog.verify_chain() AS v
      ORDER BY v.problem, v.found$$,
    '... and two ranges of sessions answer what the whole run does');
ROLLBACK TO t6;
UPDATE undolog.undolog_chain_anchors
SET heads = jsonb_set(heads, ARRAY['c0000000-0000-4000-8000-000000000001', '1'], '"zz"')
WHERE anchor_id = 1;
SELECT results_eq(
    'malformed_findings', 'one_malformed_head',
    'a head that is not hex: the head is malformed, the anchor altered, no error');
ROLLBACK TO t6;
UPDATE undolog.undolog_chain_anchors SET heads = '[]' WHERE anchor_id = 1;
SELECT results_eq(
    $$SELECT session_id::text, problem FROM undolog.verify_chain()$$,
    $$VALUES (NULL::text, 'altered')$$,
    'heads that are no object: the anchor altered, no error');
ROLLBACK TO t6;
SET LOCAL session_replication_role = origin;

-- Staff only.
SET LOCAL ROLE undolog_agent;
SELECT throws_ok('SELECT * FROM undolog.verify_chain()', '42501', NULL,
                 'an agent cannot run verify_chain');
SELECT throws_ok('SELECT * FROM undolog.write_anchor()', '42501', NULL,
                 'nor write an anchor');
SELECT throws_ok('SELECT * FROM undolog.undolog_chain_anchors', '42501', NULL,
                 'nor read the anchors');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
