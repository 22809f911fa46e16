-- How many approval requests may wait: the sessions of one login may have at most
-- undolog.max_pending_approvals() requests pending at once (the database-wide setting,
-- 100 unless set); the next new IRREVERSIBLE call is refused with UL029 and writes
-- nothing. Decided requests free their place; another login has a bound of its own; an
-- agent's own SET does not lift it; a malformed setting is UL008.
-- Logins are played with SET SESSION AUTHORIZATION (ownership is session_user).
BEGIN;
SELECT plan(16);

\ir _helpers.psql

CREATE ROLE ul_t_flood_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_flood_other NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_flood_approver NOLOGIN IN ROLE undolog_approver;

CREATE FUNCTION pg_temp.set_bound(p_value text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET undolog.max_pending_approvals = %L',
                   current_database(), p_value);
END $$;

-- A new session of the calling login, and one irreversible call in it: the action.
CREATE FUNCTION pg_temp.ask(p_seed text) RETURNS text LANGUAGE sql AS $$
    SELECT undolog.begin_session(md5(p_seed)::uuid);
    SELECT i.action
    FROM undolog.intercept(md5(p_seed)::uuid, 0, 'wire', 'irreversible',
                           jsonb_build_object('to', p_seed), pg_temp.sig('call' || p_seed)) AS i;
$$;
GRANT EXECUTE ON FUNCTION pg_temp.ask(text) TO PUBLIC;
-- The calling login's pending requests.
CREATE FUNCTION pg_temp.pending() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS $$
    SELECT count(*) FROM undolog.undolog_approval_requests AS a
    JOIN undolog.undolog_sessions AS s USING (session_id)
    WHERE a.state = 'pending' AND s.owner_role = session_user
$$;
GRANT EXECUTE ON FUNCTION pg_temp.pending() TO PUBLIC;

SELECT is(undolog.max_pending_approvals(), 100, 'unset, a login may have 100 requests pending');

SELECT pg_temp.set_bound('3');
SELECT is(undolog.max_pending_approvals(), 3, 'the database''s setting sets the bound');
SET SESSION AUTHORIZATION ul_t_flood_agent;
SELECT pg_temp.tool('wire', 'irreversible');
SELECT is(pg_temp.ask('f1') || pg_temp.ask('f2') || pg_temp.ask('f3'),
          'await_approval' || 'await_approval' || 'await_approval',
          'three sessions of one login each ask');
RESET SESSION AUTHORIZATION;
SELECT pg_temp.journal_state() AS before \gset
SET SESSION AUTHORIZATION ul_t_flood_agent;
SELECT throws_ok($$SELECT pg_temp.ask('f4')$$, 'UL029',
                 'ul_t_flood_agent already has 3 approval requests pending',
                 'a fourth request of the login is refused: UL029');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.journal_state(), :'before', '... and nothing is written');

-- One session asking a second call counts as much as another session.
SET SESSION AUTHORIZATION ul_t_flood_agent;
SELECT throws_ok(
    format($$SELECT i.action FROM undolog.intercept(%L, 1, 'wire', 'irreversible',
                                                      '{"to": "again"}', %L) AS i$$,
           md5('f1')::uuid, pg_temp.sig('second call of f1')),
    'UL029', NULL, 'a second call of a waiting session is refused too');
SELECT is(pg_temp.pending(), 3::bigint, 'the login still has 3 requests pending');

-- A call already asked is a replay, not a new request: answered as before.
SELECT is(i.action, 'await_approval', 'a call already asked, made again, still answers its request')
FROM undolog.intercept(md5('f1')::uuid, 0, 'wire', 'irreversible', '{"to": "f1"}',
                       pg_temp.sig('callf1')) AS i;

-- An agent's own SET does not lift its bound.
SET undolog.max_pending_approvals = '1000';
SELECT throws_ok($$SELECT pg_temp.ask('f5')$$, 'UL029', NULL,
                 'a session-level SET is ignored: still UL029');
RESET undolog.max_pending_approvals;
RESET SESSION AUTHORIZATION;

-- Another login has a bound of its own.
SET SESSION AUTHORIZATION ul_t_flood_other;
SELECT pg_temp.tool('wire', 'irreversible');
SELECT is(pg_temp.ask('o1'), 'await_approval', 'another login asks: its bound is its own');
RESET SESSION AUTHORIZATION;

-- A decision frees a place.
SET ROLE ul_t_flood_approver;
SELECT lives_ok(
    format($$SELECT undolog.reject(a.approval_id, 'ann', 'no') FROM
             undolog.undolog_approval_requests AS a WHERE a.session_id = %L$$, md5('f2')::uuid),
    'the approver rejects one request');
RESET ROLE;
SET SESSION AUTHORIZATION ul_t_flood_agent;
SELECT is(pg_temp.pending(), 2::bigint, '... which leaves 2 pending');
SELECT is(pg_temp.ask('f6'), 'await_approval', '... and the login may ask again');
SELECT throws_ok($$SELECT pg_temp.ask('f7')$$, 'UL029', NULL, '... up to the bound');
RESET SESSION AUTHORIZATION;

-- A setting the engine cannot read is refused, not ignored.
SELECT pg_temp.set_bound('lots');
SELECT throws_ok($$SELECT undolog.max_pending_approvals()$$, 'UL008',
                 'undolog.max_pending_approvals must be an integer from 1 to 1000000, not ''lots''',
                 'a malformed setting: UL008');
SELECT pg_temp.set_bound('0');
SELECT throws_ok($$SELECT undolog.max_pending_approvals()$$, 'UL008', NULL,
                 'a bound of 0: UL008');

SELECT * FROM finish();
ROLLBACK;
