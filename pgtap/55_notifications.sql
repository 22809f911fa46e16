-- Notifications of approval requests: channels (operator only, secrets unreadable but to
-- the delivery worker), one delivery per pending request and live channel, claims that
-- two workers never share (SKIP LOCKED), attempts reported with backoff, a last failure,
-- a retry; what an agent reads. Logins are played with SET SESSION AUTHORIZATION
-- (ownership is session_user), approver and operator with SET ROLE.
BEGIN;
SELECT plan(44);

\ir _helpers.psql

CREATE ROLE ul_t_nt_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_nt_other NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_nt_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_nt_operator NOLOGIN IN ROLE undolog_operator;

-- An IRREVERSIBLE call of a new session of the current login: its approval id.
CREATE FUNCTION pg_temp.ask(p_session uuid)
RETURNS uuid LANGUAGE sql AS $$
    SELECT undolog.begin_session(p_session);
    SELECT i.approval_id
    FROM undolog.intercept(p_session, 0, 'wire', 'irreversible', '{"to": "acme"}',
                           pg_temp.sig(p_session::text), NULL) AS i
$$;
GRANT EXECUTE ON FUNCTION pg_temp.ask(uuid) TO PUBLIC;

SET SESSION AUTHORIZATION ul_t_nt_agent;
SELECT pg_temp.tool('wire', 'irreversible');
SELECT pg_temp.ask('55000000-0000-4000-8000-000000000001') AS mine \gset
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION ul_t_nt_other;
SELECT pg_temp.tool('wire', 'irreversible');
SELECT pg_temp.ask('55000000-0000-4000-8000-000000000002') AS theirs \gset
RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------------------
-- Channels: the operator adds them; bad definitions and the agent are refused.
-- ---------------------------------------------------------------------------------------
SET ROLE ul_t_nt_operator;
SELECT isnt(undolog.add_notification_channel('hook', 'webhook', 'https://hooks.test/a/b?t=1',
                                             '{"format": "slack"}', 'k0123456789abcdef',
                                             'https://dash.test', 'ops'),
            NULL, 'an operator adds a webhook');
SELECT isnt(undolog.add_notification_channel('mail', 'email', 'a@x.test, b@x.test',
                                             '{"smtp_host": "localhost", "smtp_port": 25,
                                               "smtp_from": "u@x.test"}', NULL, NULL, 'ops'),
            NULL, 'an operator adds an e-mail channel');
SELECT throws_ok($$SELECT undolog.add_notification_channel('hook', 'webhook', 'https://h.test',
                   '{}', 'k0123456789abcdef', NULL, 'ops')$$,
                 'UL026', NULL, 'a second live channel of one name is refused');
SELECT throws_ok($$SELECT undolog.add_notification_channel('h2', 'webhook', 'https://h.test',
                   '{}', 'short', NULL, 'ops')$$,
                 'UL026', NULL, 'a webhook secret shorter than 16 characters is refused');
SELECT throws_ok($$SELECT undolog.add_notification_channel('h2', 'webhook', 'file:///etc/passwd',
                   '{}', 'k0123456789abcdef', NULL, 'ops')$$,
                 'UL026', NULL, 'a URL that is not http(s) is refused');
SELECT throws_ok($$SELECT undolog.add_notification_channel('m2', 'email', E'a@x.test\nBcc: e@v.test',
                   '{"smtp_host": "h", "smtp_port": 25, "smtp_from": "u@x.test"}', NULL, NULL,
                   'ops')$$,
                 'UL026', NULL, 'a recipient with a line break (a header injection) is refused');
SELECT throws_ok($$SELECT undolog.add_notification_channel('m2', 'email', 'a@x.test',
                   '{"smtp_host": "h", "smtp_port": 70000, "smtp_from": "u@x.test"}', NULL,
                   NULL, 'ops')$$,
                 'UL026', NULL, 'a port out of range is refused');
SELECT throws_ok($$SELECT undolog.add_notification_channel('h2', 'sms', 'x', '{}', NULL, NULL,
                   'ops')$$,
                 'UL026', NULL, 'an unknown kind is refused');
SELECT throws_ok($$SELECT undolog.add_notification_channel('h2', 'webhook', 'https://h.test',
                   '{}', 'k0123456789abcdef', NULL, ' ')$$,
                 'UL008', NULL, 'a blank p_by is refused');
SELECT throws_ok($$SELECT undolog.remove_notification_channel('nope', 'ops')$$,
                 'UL025', NULL, 'removing an unknown channel is UL025');
SELECT is((SELECT destination FROM undolog.notification_channels WHERE channel_name = 'hook'),
          'https://hooks.test/…', 'the view shows a webhook''s scheme and host, not its path');
SELECT throws_ok($$SELECT undolog.add_notification_channel('h2', 'webhook',
                   'https://bot:T0KEN@h.test/x', '{}', 'k0123456789abcdef', NULL, 'ops')$$,
                 'UL026', NULL, 'a webhook URL with user info (a credential) is refused');
SELECT throws_ok($$SELECT undolog.add_notification_channel('h3', 'webhook', 'https://h.test',
                   '{}', 'k0123456789abcdef', 'https://me:pw@dash.test', 'ops')$$,
                 'UL026', NULL, '... and so is a dashboard URL with user info');
SELECT throws_ok($$SELECT undolog.add_notification_channel('h4', 'webhook',
                   'https://h.test/services/T0/B0/TOKEN' || chr(127), '{}',
                   'k0123456789abcdef', NULL, 'ops')$$,
                 'UL026', NULL, 'a webhook URL with a control character (DEL) is refused');
SELECT throws_ok($$SELECT undolog.add_notification_channel('h5', 'webhook', 'https://h.test',
                   '{}', 'k0123456789abcdef', 'https://dash.test/' || chr(27), 'ops')$$,
                 'UL026', NULL, '... and so is a dashboard URL with one (ESC)');
RESET ROLE;
-- a channel whose URL holds user info (added before it was refused; removed, so that it
-- announces nothing here): the view shows its scheme and host alone
INSERT INTO undolog.undolog_notification_channels (
    channel_name, kind, destination, secret, created_by, created_role, removed_at, removed_by,
    removed_role
)
VALUES ('old', 'webhook', 'https://bot:T0KEN@x@hooks.test:8443/p?q=1', 'k0123456789abcdef',
        'ops', 'ops', now(), 'ops', 'ops');
SET ROLE ul_t_nt_approver;
SELECT is((SELECT destination FROM undolog.notification_channels WHERE channel_name = 'old'),
          'https://hooks.test:8443/…', 'the view shows no user info of a webhook''s URL');
SELECT is((SELECT count(*)::integer FROM undolog.notification_channels
           WHERE destination LIKE '%T0KEN%'),
          0, '... nor any of it anywhere');
RESET ROLE;

SET SESSION AUTHORIZATION ul_t_nt_agent;
SELECT throws_ok($$SELECT secret FROM undolog.undolog_notification_channels$$,
                 '42501', NULL, 'an agent cannot read the channels');
SELECT throws_ok($$SELECT * FROM undolog.notification_channels$$,
                 '42501', NULL, '... nor their view');
SELECT throws_ok($$SELECT * FROM undolog.claim_notification()$$,
                 '42501', NULL, '... nor claim a delivery (which carries the secret)');
SELECT throws_ok($$SELECT undolog.add_notification_channel('x', 'webhook', 'https://e.test',
                   '{}', 'k0123456789abcdef', NULL, 'me')$$,
                 '42501', NULL, '... nor add a channel');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_nt_approver;
SELECT throws_ok($$SELECT * FROM undolog.claim_notification()$$,
                 '42501', NULL, 'an approver cannot claim a delivery');
RESET ROLE;

-- ---------------------------------------------------------------------------------------
-- Enqueue, claim, finish.
-- ---------------------------------------------------------------------------------------
SET ROLE ul_t_nt_operator;
SELECT is(undolog.enqueue_notifications(), 4, 'two requests x two channels: four deliveries');
SELECT is(undolog.enqueue_notifications(), 0, 'enqueuing again adds none');
SELECT * FROM undolog.claim_notification() \gset first_
SELECT is(:'first_attempt'::integer, 1, 'a claim is the delivery''s first attempt');
SELECT is(:'first_secret', CASE :'first_channel_kind' WHEN 'webhook' THEN 'k0123456789abcdef' END,
          'the claim hands the worker the channel''s secret');
SELECT is((SELECT count(*)::integer FROM undolog.undolog_notification_deliveries
           WHERE state = 'pending' AND next_attempt_at <= clock_timestamp()),
          3, 'a claimed delivery is not due again until its lease ends');
SELECT is(undolog.finish_notification(:'first_delivery_id', 1, 'HTTP 500'), 'pending',
          'a failed attempt is due again');
SELECT ok((SELECT next_attempt_at - last_attempt_at >= interval '10 seconds'
           FROM undolog.undolog_notification_deliveries WHERE delivery_id = :'first_delivery_id'),
          '... after the backoff (10 s after the first failure)');
SELECT is(undolog.finish_notification(:'first_delivery_id', 1, NULL), 'stale',
          'a second report of that attempt changes nothing');
SELECT throws_ok($$SELECT undolog.finish_notification(gen_random_uuid(), 1, NULL)$$,
                 'UL025', NULL, 'reporting an unknown delivery is UL025');
RESET ROLE;

-- the last attempt fails the delivery; an operator's retry makes it due again
UPDATE undolog.undolog_notification_deliveries
SET max_attempts = 2, next_attempt_at = now() - interval '1 day'
WHERE delivery_id = :'first_delivery_id';
SET ROLE ul_t_nt_operator;
SELECT is((SELECT c.attempt FROM undolog.claim_notification() AS c), 2,
          'the oldest due delivery is claimed again: attempt 2');
SELECT is(undolog.finish_notification(:'first_delivery_id', 2, 'HTTP 503'), 'failed',
          'the last attempt failing fails the delivery');
SELECT is(undolog.retry_notification(:'first_delivery_id', 'ops'), 10,
          'a retry gives it the default 8 attempts more');
RESET ROLE;

-- ---------------------------------------------------------------------------------------
-- What the agent reads; a decided request's deliveries are cancelled.
-- ---------------------------------------------------------------------------------------
SET SESSION AUTHORIZATION ul_t_nt_agent;
SELECT is((SELECT array_agg(DISTINCT approval_id) FROM undolog.undolog_notification_deliveries),
          ARRAY[:'mine'::uuid], 'an agent reads the deliveries of its own sessions only');
RESET SESSION AUTHORIZATION;
SET ROLE ul_t_nt_approver;
SELECT undolog.reject(:'theirs', 'lead', 'no');
RESET ROLE;
SET ROLE ul_t_nt_operator;
SELECT undolog.enqueue_notifications();
SELECT is((SELECT array_agg(DISTINCT state) FROM undolog.undolog_notification_deliveries
           WHERE approval_id = :'theirs'),
          ARRAY['cancelled'], 'a request decided before delivery has its deliveries cancelled');
SELECT throws_ok(pg_catalog.format('SELECT undolog.retry_notification(%L, %L)',
                 (SELECT delivery_id FROM undolog.undolog_notification_deliveries
                  WHERE approval_id = :'theirs' LIMIT 1), 'ops'),
                 'UL001', NULL, '... and cannot be retried');
SELECT isnt(undolog.remove_notification_channel('mail', 'ops'), NULL,
            'an operator removes a channel');
SELECT is((SELECT state FROM undolog.undolog_notification_deliveries
           WHERE approval_id = :'mine' AND channel_name = 'mail'),
          'cancelled', '... and its deliveries not sent are cancelled');
RESET ROLE;

-- A last attempt claimed and never reported (its worker stopped, or the send hung) is not
-- claimed again once its lease has lapsed: it fails, saying why.
UPDATE undolog.undolog_notification_deliveries
SET attempts = max_attempts, claimed_until = now() - interval '1 day',
    next_attempt_at = now() - interval '1 day'
WHERE approval_id = :'mine' AND state = 'pending';
SET ROLE ul_t_nt_operator;
SELECT is((SELECT count(*)::integer FROM undolog.claim_notification()), 0,
          'a delivery whose last attempt lapsed unreported is not claimed again');
RESET ROLE;
SELECT is((SELECT array_agg(DISTINCT state) FROM undolog.undolog_notification_deliveries
           WHERE approval_id = :'mine' AND channel_name <> 'mail'),
          ARRAY['failed'], '... it failed');
SELECT ok((SELECT bool_and(last_error LIKE 'attempt % of % was claimed and not reported within '
                           || 'its lease%' AND claimed_until IS NULL)
           FROM undolog.undolog_notification_deliveries
           WHERE approval_id = :'mine' AND channel_name <> 'mail'),
          '... saying why');

-- Retention deletes a dropped month's requests: their deliveries go with them.
SELECT cmp_ok(undolog.prune_month_rows(now() - interval '1 day', now() + interval '1 day'),
              '>=', 2::bigint, 'retention prunes the month''s requests');
SELECT is((SELECT count(*)::integer FROM undolog.undolog_notification_deliveries), 0,
          '... and their deliveries with them');

SELECT * FROM finish();
ROLLBACK;
