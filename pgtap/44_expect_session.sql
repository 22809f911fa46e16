-- undolog.expect_session: an operator's action applies to the session as it was read, or
-- not at all (the dashboard's and `undolog sessions resume|retry|abandon --seen`'s check,
-- made under the session's lock, in the action's own transaction).
BEGIN;
SELECT plan(23);

\ir _helpers.psql


-- A session halted at a barrier (an irreversible call that committed).
SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 1) AS f1 \gset
SELECT pg_temp.irreversible(:'s1', 2, 'committed') AS f2 \gset
SELECT undolog.fail_session(:'s1', 'x');
SELECT pg_temp.walk(:'s1');
SELECT is(pg_temp.session_state(:'s1'), 'halted', 'the session is halted at the barrier');
SELECT s.updated_at AS seen FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s1' \gset

SET LOCAL ROLE undolog_operator;
-- Stale: the session's updated_at is not the one the operator read. (An earlier instant
-- stands for a read made before another operator's action.)
SELECT throws_ok(format('SELECT undolog.expect_session(%L, %L::timestamptz - interval ''1 microsecond'')',
                        :'s1', :'seen'),
                 'UL001', NULL, 'a session changed since it was read is refused (UL001)');
SELECT throws_like(format('SELECT undolog.expect_session(%L, %L::timestamptz + interval ''1 second'')',
                          :'s1', :'seen'),
                   '%changed since it was read: it is halted, updated at %',
                   '... the message says so, with its state now');
SELECT throws_ok(format('SELECT undolog.expect_session(%L, NULL)', :'s1'), 'UL008', NULL,
                 'a NULL p_seen is refused (UL008)');
SELECT throws_ok(format('SELECT undolog.expect_session(gen_random_uuid(), %L)', :'seen'), 'UL002',
                 NULL, 'an unknown session is refused (UL002)');
RESET ROLE;
SELECT pg_temp.refused(format('SELECT undolog.expect_session(%L, %L::timestamptz - interval ''1 day'')',
                              :'s1', :'seen'),
                       'UL001', 'a stale check');

-- Current: the check passes, answers the state, and the action follows in the same
-- transaction.
SET LOCAL ROLE undolog_operator;
SELECT lives_ok(format('SELECT undolog.expect_session(%L, %L)', :'s1', :'seen'),
                'the session as it was read passes the check');
SELECT is(undolog.expect_session(:'s1', :'seen'), 'halted', 'it answers the session''s state');
SELECT is(undolog.resume_session(:'s1', 'carol', 'dealt with by hand'), 'compensating',
          'the action follows under the same lock');
RESET ROLE;
SELECT is(pg_temp.entry_state(:'f2'), 'skipped', 'the barrier was passed');
SELECT is(
    (SELECT count(*) FROM undolog.undolog_operator_actions AS o WHERE o.session_id = :'s1')::integer,
    1, 'the check itself records nothing: one operator action');

-- It locks the session as lock_session does: the advisory lock exclusive (and the row
-- FOR UPDATE, which the lock wait tests in Python hold open).
SELECT pg_temp.new_session() AS s2 \gset
SELECT s.updated_at AS seen2 FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s2' \gset
SELECT count(*) AS held FROM pg_locks AS l
WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.mode = 'ExclusiveLock' \gset
SET LOCAL ROLE undolog_operator;
SELECT is(undolog.expect_session(:'s2', :'seen2'), 'active', 'any state may be checked');
RESET ROLE;
SELECT is((SELECT count(*) FROM pg_locks AS l
           WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
             AND l.mode = 'ExclusiveLock')::integer,
          :held + 1, 'it holds the session''s advisory lock exclusive until the transaction ends');


-- A change made in the same instant as the read (here: in the same transaction, whose
-- now() is the same all through) is still a change: the guard stamps every version of
-- the row with a later updated_at, so the value read no longer matches.
SELECT pg_temp.new_session() AS s4 \gset
SELECT s.updated_at AS seen4 FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s4' \gset
SELECT undolog.heartbeat(:'s4');
SET LOCAL ROLE undolog_operator;
SELECT throws_ok(format('SELECT undolog.expect_session(%L, %L)', :'s4', :'seen4'), 'UL001', NULL,
                 'a change in the same instant as the read is refused (UL001)');
RESET ROLE;
SELECT s.updated_at AS seen4b FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s4' \gset
SELECT undolog.fail_session(:'s4', 'x');
SET LOCAL ROLE undolog_operator;
SELECT throws_ok(format('SELECT undolog.expect_session(%L, %L)', :'s4', :'seen4b'), 'UL001', NULL,
                 '... and so is the next one, after the value was read again');
RESET ROLE;
SELECT s.updated_at AS seen4c FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s4' \gset
SET LOCAL ROLE undolog_operator;
SELECT is(undolog.expect_session(:'s4', :'seen4c'), 'failed',
          'the value of the version now stored passes');
RESET ROLE;

-- Privileges: the operator role alone, as for resume, retry and abandon. An agent's
-- login may not lock even its own session this way.
CREATE ROLE ul_t_expect_agent NOLOGIN IN ROLE undolog_agent;
SET SESSION AUTHORIZATION ul_t_expect_agent;
SELECT undolog.begin_session() AS s3 \gset
SELECT s.updated_at AS seen3 FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s3' \gset
SELECT throws_ok(format('SELECT undolog.expect_session(%L, %L)', :'s3', :'seen3'), '42501', NULL,
                 'an agent login cannot call it, on its own session either');
RESET SESSION AUTHORIZATION;
SET LOCAL ROLE undolog_agent;
SELECT throws_ok(format('SELECT undolog.expect_session(%L, %L)', :'s2', :'seen2'), '42501', NULL,
                 'the agent role cannot call it');
RESET ROLE;
SET LOCAL ROLE undolog_approver;
SELECT throws_ok(format('SELECT undolog.expect_session(%L, %L)', :'s2', :'seen2'), '42501', NULL,
                 'the approver role cannot call it');
RESET ROLE;
SELECT ok(has_function_privilege('undolog_operator', 'undolog.expect_session(uuid, timestamptz)',
                                 'EXECUTE'),
          'the operator role may call it');
SELECT ok(NOT has_function_privilege('undolog_agent', 'undolog.expect_session(uuid, timestamptz)',
                                     'EXECUTE')
          AND NOT has_function_privilege('undolog_approver',
                                         'undolog.expect_session(uuid, timestamptz)', 'EXECUTE'),
          'neither the agent nor the approver role may');
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
                  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc AS p WHERE p.oid = 'undolog.expect_session(uuid, timestamptz)'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path, not executable by PUBLIC');

SELECT * FROM finish();
ROLLBACK;
