-- undolog.fail_compensation (and undolog.retry_delay): retries with capped exponential
-- backoff, then compensation_failed and a halted session.
BEGIN;
SELECT plan(49);

\ir _helpers.psql


-- The backoff formula.
SELECT is(undolog.retry_delay(1, '1 second', '5 minutes'), interval '1 second', 'attempt 1: base');
SELECT is(undolog.retry_delay(2, '1 second', '5 minutes'), interval '2 seconds', 'attempt 2: 2 x base');
SELECT is(undolog.retry_delay(5, '1 second', '5 minutes'), interval '16 seconds', 'attempt 5: 16 x base');
SELECT is(undolog.retry_delay(9, '1 second', '5 minutes'), interval '256 seconds', 'attempt 9: 256 x base, under the cap');
SELECT is(undolog.retry_delay(10, '1 second', '5 minutes'), interval '5 minutes', 'attempt 10: 512 s, capped at 5 minutes');
SELECT is(undolog.retry_delay(100000, '1 second', '5 minutes'), interval '5 minutes',
          'a huge attempt number saturates at the cap, no overflow');
SELECT is(undolog.retry_delay(3, '250 milliseconds', '1 hour'), interval '1 second', 'base 250 ms, attempt 3');

-- Default settings: 5 attempts, 1 s base, 5 min cap.
CREATE TEMP TABLE s1 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e1 AS
SELECT step, pg_temp.call((SELECT sid FROM s1), step) AS effect_id
FROM generate_series(1, 2) AS step ORDER BY step;
SELECT undolog.fail_session((SELECT sid FROM s1), 'x');
SELECT pg_temp.undo_of(effect_id) AS u2, effect_id AS f2 FROM e1 WHERE step = 2 \gset
SELECT pg_temp.undo_of(effect_id) AS u1, effect_id AS f1 FROM e1 WHERE step = 1 \gset

-- One attempt: claim, fail, check, make it due again.
CREATE FUNCTION pg_temp.attempt_and_fail(p_session uuid, p_error text) RETURNS text LANGUAGE plpgsql
AS $$
DECLARE
    v_undo uuid;
    v_answer text;
BEGIN
    SELECT c.undo_id INTO STRICT v_undo FROM undolog.claim_compensation(p_session) AS c;
    v_answer := undolog.fail_compensation(v_undo, p_error);
    RETURN v_answer || ' ' || coalesce((SELECT (u.next_attempt_at - now())::text
                                        FROM undolog.undolog_undo_stack AS u
                                        WHERE u.undo_id = v_undo AND u.state = 'pending'), '-');
END
$$;
CREATE FUNCTION pg_temp.make_due(p_undo uuid) RETURNS void LANGUAGE sql
AS $$ UPDATE undolog.undolog_undo_stack SET next_attempt_at = now() WHERE undo_id = p_undo $$;

SELECT is(pg_temp.attempt_and_fail((SELECT sid FROM s1), 'timeout 1'), 'retry 00:00:01',
          'failure 1: retry in 1 second');
SELECT is(pg_temp.entry_state(:'f2') || '/' || pg_temp.effect_state(:'f2'), 'pending/compensating',
          '... the entry is pending again, the effect stays compensating');
SELECT is_empty($$SELECT * FROM undolog.claim_compensation((SELECT sid FROM s1))$$,
                '... not due yet: no row (and never the entry below)');
SELECT is(pg_temp.entry_state(:'f1'), 'pending', '... the entry below is untouched');
SELECT pg_temp.make_due(:'u2');
SELECT is(pg_temp.attempt_and_fail((SELECT sid FROM s1), 'timeout 2'), 'retry 00:00:02',
          'failure 2: retry in 2 seconds');
SELECT pg_temp.make_due(:'u2');
SELECT is(pg_temp.attempt_and_fail((SELECT sid FROM s1), 'timeout 3'), 'retry 00:00:04',
          'failure 3: retry in 4 seconds');
SELECT pg_temp.make_due(:'u2');
SELECT is(pg_temp.attempt_and_fail((SELECT sid FROM s1), 'timeout 4'), 'retry 00:00:08',
          'failure 4: retry in 8 seconds');
SELECT pg_temp.make_due(:'u2');
SELECT is(pg_temp.attempt_and_fail((SELECT sid FROM s1), 'timeout 5'), 'compensation_failed -',
          'failure 5 of the default 5 attempts: compensation_failed');
SELECT is(pg_temp.entry_state(:'f2') || '/' || pg_temp.effect_state(:'f2') || '/' ||
          pg_temp.session_state((SELECT sid FROM s1)),
          'compensation_failed/compensation_failed/halted',
          '... entry and effect compensation_failed, session halted');
SELECT is(pg_temp.entry_state(:'f1'), 'pending', '... the entry below stays pending');
SELECT ok((SELECT s.halt_undo_id = :'u2'::uuid
                  AND s.error = format('compensation undo_step of step_2 (undo entry %s) failed after 5 attempt(s): timeout 5', :'u2')
           FROM undolog.undolog_sessions AS s WHERE s.session_id = (SELECT sid FROM s1)),
          '... the session says where and why it halted');
SELECT is((SELECT e.error FROM undolog.undolog_effect_log AS e WHERE e.effect_id = :'f2'), 'timeout 5',
          '... the effect keeps the last error');
SELECT results_eq(
    format($$SELECT to_state, attempt, detail ->> 'error' FROM undolog.undolog_undo_history
             WHERE undo_id = %L AND from_state = 'compensating' ORDER BY history_id$$, :'u2'),
    $$VALUES ('pending', 1, 'timeout 1'), ('pending', 2, 'timeout 2'), ('pending', 3, 'timeout 3'),
             ('pending', 4, 'timeout 4'), ('compensation_failed', 5, 'timeout 5')$$,
    'the undo history keeps every attempt''s error'
);
-- ORDER BY seq, at: the call committed at once, so its creation and its commit share
-- the commit's one link (seq); the creation comes first by its time.
SELECT results_eq(
    format($$SELECT from_state, to_state FROM undolog.effect_timeline
             WHERE effect_id = %L ORDER BY seq, at$$, :'f2'),
    $$VALUES (NULL, 'executing'), ('executing', 'committed'),
             ('committed', 'compensating'), ('compensating', 'compensation_failed')$$,
    'the effect went compensating once, then compensation_failed'
);
SELECT pg_temp.refused(format('SELECT undolog.fail_compensation(%L, %L)', :'u2', 'again'), 'UL001',
                       'failing a compensation_failed entry');
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L)', (SELECT sid FROM s1)),
                       'UL010', 'claiming on the halted session');

-- The descriptor's max_attempts wins; GUCs set base and cap.
CREATE TEMP TABLE s2 AS SELECT pg_temp.new_session() AS sid;
SELECT pg_temp.call((SELECT sid FROM s2), 1, 'committed', '{"name": "refund", "max_attempts": 2}') AS f3 \gset
SELECT pg_temp.undo_of(:'f3') AS u3 \gset
SELECT undolog.fail_session((SELECT sid FROM s2), 'x');
SET LOCAL undolog.retry_base = '10 seconds';
SET LOCAL undolog.retry_cap = '15 seconds';
SELECT is(pg_temp.attempt_and_fail((SELECT sid FROM s2), 'e1'), 'retry 00:00:10',
          'the GUC undolog.retry_base sets the first delay');
SELECT pg_temp.make_due(:'u3');
SELECT is(pg_temp.attempt_and_fail((SELECT sid FROM s2), 'e2'), 'compensation_failed -',
          'the descriptor''s max_attempts (2) overrides the default');
SELECT is(undolog.retry_delay(2, '10 seconds', '15 seconds'), interval '15 seconds',
          'and the cap would have held the second delay at 15 s');

CREATE TEMP TABLE s3 AS SELECT pg_temp.new_session() AS sid;
SELECT pg_temp.call((SELECT sid FROM s3), 1) AS f4 \gset
SELECT pg_temp.undo_of(:'f4') AS u4 \gset
SELECT undolog.fail_session((SELECT sid FROM s3), 'x');
SET LOCAL undolog.default_max_attempts = '1';
SELECT is(pg_temp.attempt_and_fail((SELECT sid FROM s3), NULL), 'compensation_failed -',
          'the GUC undolog.default_max_attempts applies without a descriptor max_attempts');
SELECT is((SELECT u.last_error FROM undolog.undolog_undo_stack AS u WHERE u.undo_id = :'u4'),
          'compensation failed', 'a NULL error is recorded as "compensation failed"');
RESET undolog.default_max_attempts;
RESET undolog.retry_base;
RESET undolog.retry_cap;

-- Bad input.
CREATE TEMP TABLE s4 AS SELECT pg_temp.new_session() AS sid;
CREATE TEMP TABLE e4 AS
SELECT step, pg_temp.call((SELECT sid FROM s4), step) AS effect_id
FROM generate_series(1, 2) AS step ORDER BY step;
SELECT undolog.fail_session((SELECT sid FROM s4), 'x');
SELECT c.undo_id AS u5 FROM undolog.claim_compensation((SELECT sid FROM s4)) AS c \gset
SELECT pg_temp.undo_of(effect_id) AS u6 FROM e4 WHERE step = 1 \gset
SELECT pg_temp.refused('SELECT undolog.fail_compensation(gen_random_uuid(), ''x'')', 'UL012',
                       'failing an unknown undo id');
SELECT pg_temp.refused('SELECT undolog.fail_compensation(NULL, ''x'')', 'UL012',
                       'failing a NULL undo id');
SELECT pg_temp.refused(format('SELECT undolog.fail_compensation(%L, %L)', :'u6', 'x'), 'UL001',
                       'failing an entry that is not in flight');
SELECT pg_temp.refused(format('SELECT undolog.fail_compensation(%L, %L, 7)', :'u5', 'x'), 'UL001',
                       'failing with a stale attempt number');
SET LOCAL undolog.retry_base = '-1 second';
SELECT pg_temp.refused(format('SELECT undolog.fail_compensation(%L, %L)', :'u5', 'x'), 'UL008',
                       'a negative retry_base GUC');
SELECT throws_like(format('SELECT undolog.fail_compensation(%L, %L)', :'u5', 'x'),
                   'undolog.retry_base must be a positive interval, not ''-1 second''',
                   '... named in the message');
RESET undolog.retry_base;
SET LOCAL undolog.retry_cap = 'forever';
SELECT pg_temp.refused(format('SELECT undolog.fail_compensation(%L, %L)', :'u5', 'x'), 'UL008',
                       'a retry_cap GUC that is not an interval');
RESET undolog.retry_cap;
SELECT undolog.complete_compensation(:'u5');
SELECT pg_temp.refused(format('SELECT undolog.fail_compensation(%L, %L)', :'u5', 'x'), 'UL001',
                       'failing after completing');

-- Privileges.
SELECT c.undo_id AS u7 FROM undolog.claim_compensation((SELECT sid FROM s4)) AS c \gset
SET LOCAL ROLE undolog_agent;
SELECT throws_ok(format('SELECT undolog.fail_compensation(%L, %L)', :'u7', 'x'), '42501', NULL,
                 'the agent role cannot fail compensations');
RESET ROLE;
SET LOCAL ROLE undolog_operator;
SELECT is(undolog.fail_compensation(:'u7', 'x'), 'retry', 'the operator role can');
RESET ROLE;
SELECT ok(NOT has_function_privilege('public', 'undolog.fail_compensation(uuid, text, integer)', 'EXECUTE'),
          'PUBLIC cannot execute it');
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
           FROM pg_proc AS p WHERE p.oid = 'undolog.fail_compensation(uuid, text, integer)'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path');

SELECT * FROM finish();
ROLLBACK;
