-- How many sessions a login may have unfinished: at most undolog.max_live_sessions()
-- (the database-wide setting, 100,000 unless set); begin_session refuses a new one with
-- UL031 and writes nothing. Unfinished: active, failed, awaiting_approval, compensating,
-- and halted until an operator resolves it. A login's existing session is still renewed
-- at its bound; another login has a bound of its own; an agent's own SET does not lift
-- it; a malformed setting is UL008. The count is an index-only scan of the login's
-- unfinished sessions (undolog_sessions_owner_live_idx), whatever else the table holds.
-- Logins are played with SET SESSION AUTHORIZATION (ownership is session_user).
BEGIN;
SELECT plan(21);

\ir _helpers.psql

CREATE ROLE ul_t_live_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_live_other NOLOGIN IN ROLE undolog_agent;

CREATE FUNCTION pg_temp.set_bound(p_value text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET undolog.max_live_sessions = %L',
                   current_database(), p_value);
END $$;

-- The plan of begin_session's count for the calling login, read as the engine's owner
-- reads it (SECURITY DEFINER: no row-level security), session_user still the login.
CREATE FUNCTION pg_temp.count_plan() RETURNS text LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_plan text := '';
    v_line text;
BEGIN
    FOR v_line IN EXECUTE
        $q$EXPLAIN (COSTS OFF)
           SELECT pg_catalog.count(*)
           FROM (SELECT
                 FROM undolog.undolog_sessions AS s
                 WHERE s.owner_role = session_user
                   AND s.state NOT IN ('completed', 'compensated') AND s.resolved_at IS NULL
                 LIMIT 100000) AS l$q$
    LOOP
        v_plan := v_plan || v_line || E'\n';
    END LOOP;
    RETURN v_plan;
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.count_plan() TO PUBLIC;

SELECT has_function('undolog', 'max_live_sessions', '{}'::name[],
                    'undolog.max_live_sessions() exists');
SELECT is(undolog.max_live_sessions(), 100000,
          'unset, a login may have 100,000 sessions unfinished');
SELECT pg_temp.set_bound('3');
SELECT is(undolog.max_live_sessions(), 3, 'the database''s setting sets the bound');

-- Which sessions count, played by this suite's own login (a bound of 1, one session).
SELECT pg_temp.set_bound('1');
SELECT pg_temp.add_session('completed');
SELECT pg_temp.add_session('compensated');
SAVEPOINT finished;
SELECT lives_ok('SELECT undolog.begin_session()', 'completed and compensated sessions do not count');
ROLLBACK TO SAVEPOINT finished;
SAVEPOINT one;
SELECT pg_temp.add_session('active');
SELECT throws_ok('SELECT undolog.begin_session()', 'UL031', NULL, 'an active session counts');
ROLLBACK TO SAVEPOINT one;
SAVEPOINT one;
SELECT pg_temp.add_session('failed');
SELECT throws_ok('SELECT undolog.begin_session()', 'UL031', NULL,
                 'a failed session counts (its walk is still to run)');
ROLLBACK TO SAVEPOINT one;
SAVEPOINT one;
SELECT pg_temp.add_session('awaiting_approval');
SELECT throws_ok('SELECT undolog.begin_session()', 'UL031', NULL,
                 'a session awaiting approval counts');
ROLLBACK TO SAVEPOINT one;
SAVEPOINT one;
SELECT pg_temp.add_session('compensating');
SELECT throws_ok('SELECT undolog.begin_session()', 'UL031', NULL, 'a compensating session counts');
ROLLBACK TO SAVEPOINT one;
SAVEPOINT one;
SELECT pg_temp.add_session('halted') AS halted \gset
SELECT throws_ok('SELECT undolog.begin_session()', 'UL031', NULL,
                 'a halted session counts until an operator resolves it');
SELECT undolog.abandon_session(:'halted', 'ops', 'refunded by hand');
SELECT lives_ok('SELECT undolog.begin_session()', '... and not once abandoned');
ROLLBACK TO SAVEPOINT one;

-- An agent login at its bound.
SELECT pg_temp.set_bound('3');
SET SESSION AUTHORIZATION ul_t_live_agent;
SELECT undolog.begin_session(md5('l' || n)::uuid) FROM generate_series(1, 3) AS n;
RESET SESSION AUTHORIZATION;
SELECT pg_temp.journal_state() AS before \gset
SET SESSION AUTHORIZATION ul_t_live_agent;
SELECT throws_ok('SELECT undolog.begin_session()', 'UL031',
                 'ul_t_live_agent already has 3 unfinished sessions',
                 'a fourth session of the login is refused: UL031');
SELECT throws_ok(format('SELECT undolog.begin_session(%L)', md5('l4')::uuid), 'UL031', NULL,
                 '... its id given too');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.journal_state(), :'before', '... and nothing is written');

-- Its sessions are still renewed at the bound.
SET SESSION AUTHORIZATION ul_t_live_agent;
SELECT is(undolog.begin_session(md5('l1')::uuid, p_lease => '1 hour'), md5('l1')::uuid,
          'an existing session is begun again at the bound');
SELECT is(s.lease_duration, '1 hour'::interval, '... its lease renewed')
FROM undolog.undolog_sessions AS s WHERE s.session_id = md5('l1')::uuid;
SELECT lives_ok(format('SELECT undolog.heartbeat(%L)', md5('l2')::uuid),
                'a heartbeat at the bound');

-- An agent's own SET does not lift its bound.
SET undolog.max_live_sessions = '1000';
SELECT throws_ok('SELECT undolog.begin_session()', 'UL031', NULL,
                 'a session-level SET is ignored: still UL031');
RESET undolog.max_live_sessions;

-- A finished session frees a place.
SELECT undolog.complete_session(md5('l3')::uuid);
SELECT lives_ok('SELECT undolog.begin_session()', 'a completed session frees a place');
RESET SESSION AUTHORIZATION;

-- Another login has a bound of its own.
SET SESSION AUTHORIZATION ul_t_live_other;
SELECT lives_ok('SELECT undolog.begin_session()', 'another login begins: its bound is its own');
RESET SESSION AUTHORIZATION;

-- The count reads the login's unfinished sessions from their index: neither the table
-- nor the login's finished sessions, however many it left (here 5,000).
INSERT INTO undolog.undolog_sessions (session_id, owner_role, lease_duration, lease_expires_at)
SELECT gen_random_uuid(), 'ul_t_live_other', '5 minutes', now() + '5 minutes'
FROM generate_series(1, 5000);
UPDATE undolog.undolog_sessions SET state = 'completed'
WHERE owner_role = 'ul_t_live_other' AND state = 'active';
-- No ANALYZE: its row count (pg_class.reltuples) is written in place and outlives this
-- file's ROLLBACK, and the later files' plans would be made for 5,000 rows that are gone.
-- The table's few pages would be read whole: the other ways are turned off instead.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET SESSION AUTHORIZATION ul_t_live_other;
SELECT matches(pg_temp.count_plan(),
               'Index Only Scan using undolog_sessions_owner_live_idx',
               'the count is an index-only scan of the login''s unfinished sessions');
RESET SESSION AUTHORIZATION;
RESET enable_seqscan;
RESET enable_bitmapscan;

-- A setting the engine cannot read is refused, not ignored.
SELECT pg_temp.set_bound('lots');
SELECT throws_ok('SELECT undolog.max_live_sessions()', 'UL008',
                 'undolog.max_live_sessions must be an integer from 1 to 10000000, not ''lots''',
                 'a malformed setting: UL008');

SELECT * FROM finish();
ROLLBACK;
