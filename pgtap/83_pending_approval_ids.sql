-- undolog.pending_approval_ids: the pending requests alone (id, asked, deadline, expired), what
-- the dashboard inbox's total and live refresh read instead of pending_approvals. Each
-- login reads it exactly as it reads pending_approvals: an approver and an operator the
-- same rows (every pending request, none decided, the one past its deadline flagged), an
-- agent login neither view (both approvers' and operators' only), whichever sessions are
-- its own.
BEGIN;
SELECT plan(13);

\ir _helpers.psql

CREATE ROLE ul_t_agent_a NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_agent_b NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_operator NOLOGIN IN ROLE undolog_operator;

-- An irreversible call of the calling login in a new session: its request's id.
CREATE FUNCTION pg_temp.ask(p_session uuid) RETURNS uuid LANGUAGE sql AS $$
    SELECT pg_temp.tool('wire', 'irreversible');
    SELECT undolog.begin_session(p_session);
    SELECT i.approval_id
    FROM undolog.intercept(p_session, 0, 'wire', 'irreversible',
                           jsonb_build_object('to', p_session), pg_temp.sig(p_session::text)) AS i;
$$;
GRANT EXECUTE ON FUNCTION pg_temp.ask(uuid) TO PUBLIC;

-- Two agent logins' requests: agent a three (one to be decided, one with a deadline
-- that passes), agent b one.
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I SET undolog.approval_timeout = %L',
                   current_database(), '2 hours');
END $$;
SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT pg_temp.ask('a8300000-0000-4000-8000-000000000001') AS a_waits \gset
SELECT pg_temp.ask('a8300000-0000-4000-8000-000000000002') AS a_late \gset
SELECT pg_temp.ask('a8300000-0000-4000-8000-000000000003') AS a_decided \gset
RESET SESSION AUTHORIZATION;
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I RESET undolog.approval_timeout', current_database());
END $$;
SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT pg_temp.ask('b8300000-0000-4000-8000-000000000001') AS b_waits \gset
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_approver;
SELECT undolog.reject(:'a_decided', 'alice', 'no');
RESET SESSION AUTHORIZATION;

-- The clock moves on: a_late's deadline is a minute past.
ALTER TABLE undolog.undolog_approval_requests DISABLE TRIGGER undolog_approval_requests_guard;
UPDATE undolog.undolog_approval_requests
SET requested_at = now() - interval '2 hours', expires_at = now() - interval '1 minute'
WHERE approval_id = :'a_late';
ALTER TABLE undolog.undolog_approval_requests ENABLE TRIGGER undolog_approval_requests_guard;

-- Staff: the same rows as pending_approvals, and which they are.
SET SESSION AUTHORIZATION ul_t_approver;
SELECT set_eq(
    'SELECT approval_id, requested_at, expires_at, expired FROM undolog.pending_approval_ids',
    'SELECT approval_id, requested_at, expires_at, expired FROM undolog.pending_approvals',
    'an approver reads in pending_approval_ids the rows of pending_approvals'
);
SELECT set_eq(
    'SELECT approval_id, expired FROM undolog.pending_approval_ids',
    format($$VALUES (%L::uuid, FALSE), (%L::uuid, TRUE), (%L::uuid, FALSE)$$,
           :'a_waits', :'a_late', :'b_waits'),
    '... every login''s pending requests, the one past its deadline expired, none decided'
);
SELECT is(
    (SELECT count(*) FROM undolog.pending_approval_ids
     WHERE expires_at IS NULL AND approval_id = :'b_waits'),
    1::bigint,
    '... a request without a deadline has none (not expired)'
);
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION ul_t_operator;
SELECT set_eq(
    'SELECT approval_id, requested_at, expires_at, expired FROM undolog.pending_approval_ids',
    'SELECT approval_id, requested_at, expires_at, expired FROM undolog.pending_approvals',
    'an operator reads in pending_approval_ids the rows of pending_approvals'
);
SELECT is(
    (SELECT count(*) FROM undolog.pending_approval_ids),
    3::bigint,
    '... the three pending requests'
);
RESET SESSION AUTHORIZATION;

-- Agents: neither view, whose sessions they hold requests in or not.
SET SESSION AUTHORIZATION ul_t_agent_a;
SELECT throws_ok('SELECT * FROM undolog.pending_approvals', '42501',
                 'permission denied for view pending_approvals',
                 'an agent with pending requests may not read pending_approvals');
SELECT throws_ok('SELECT * FROM undolog.pending_approval_ids', '42501',
                 'permission denied for view pending_approval_ids',
                 '... nor pending_approval_ids');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION ul_t_agent_b;
SELECT throws_ok('SELECT * FROM undolog.pending_approvals', '42501', NULL,
                 'another agent may not read pending_approvals');
SELECT throws_ok('SELECT * FROM undolog.pending_approval_ids', '42501', NULL,
                 '... nor pending_approval_ids');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_agent_a;
SELECT throws_ok('SELECT count(*) FROM undolog.pending_approval_ids', '42501', NULL,
                 'nor through SET ROLE');
RESET ROLE;

-- What the views are, from the catalogue.
SELECT ok(
    (SELECT c.reloptions @> ARRAY['security_invoker=true'] FROM pg_class AS c
     WHERE c.oid = 'undolog.pending_approval_ids'::regclass),
    'pending_approval_ids runs with its reader''s rights (row-level security applies)'
);
SELECT is(
    ARRAY(SELECT r FROM unnest(ARRAY['undolog_agent', 'undolog_approver', 'undolog_operator',
                                     'public']) AS r
          WHERE has_table_privilege(r, 'undolog.pending_approval_ids', 'SELECT')),
    ARRAY(SELECT r FROM unnest(ARRAY['undolog_agent', 'undolog_approver', 'undolog_operator',
                                     'public']) AS r
          WHERE has_table_privilege(r, 'undolog.pending_approvals', 'SELECT')),
    'the roles that may read it are the ones that may read pending_approvals'
);
SELECT is(
    (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute AS a
     WHERE a.attrelid = 'undolog.pending_approval_ids'::regclass AND a.attnum > 0),
    ARRAY['approval_id', 'requested_at', 'expires_at', 'expired'],
    'its columns: the id, when it was asked, the deadline, expired'
);

SELECT * FROM finish();
ROLLBACK;
