-- undolog.unfinished_sessions(p_from, p_to): the sessions that hold the effects of
-- [p_from, p_to) against retention: every state but completed and compensated.
BEGIN;
SELECT plan(9);

\ir _helpers.psql

SELECT has_function('undolog', 'unfinished_sessions',
                    ARRAY['timestamp with time zone', 'timestamp with time zone'],
                    'undolog.unfinished_sessions(timestamptz, timestamptz) exists');
SELECT has_index('undolog', 'undolog_sessions', 'undolog_sessions_unfinished_idx',
                 'the unfinished sessions have their partial index');

CREATE TEMP TABLE fx (state text PRIMARY KEY, session_id uuid);
INSERT INTO fx
SELECT s, pg_temp.add_session(s)
FROM unnest(ARRAY['active', 'awaiting_approval', 'failed', 'compensating', 'halted',
                  'completed', 'compensated']) AS s;
-- Every session has an effect in March 1997 (in the default partition: no month exists).
SELECT FROM fx CROSS JOIN LATERAL pg_temp.add_effect(fx.session_id, '1997-03-31 23:59:59.999999+00') AS e;
-- One more active session, only in April 1997.
INSERT INTO fx VALUES ('active-april', pg_temp.add_session('active'));
SELECT FROM fx CROSS JOIN LATERAL pg_temp.add_effect(fx.session_id, '1997-04-01 00:00:00+00') AS e
WHERE fx.state = 'active-april';

SELECT set_eq(
    $$SELECT session_id, state FROM undolog.unfinished_sessions('1997-03-01 00:00+00', '1997-04-01 00:00+00')$$,
    $$SELECT session_id, state FROM fx WHERE state IN ('active', 'awaiting_approval', 'failed', 'compensating', 'halted')$$,
    'March 1997: active, awaiting_approval, failed, compensating and halted hold it; completed and compensated do not');
SELECT results_eq(
    $$SELECT session_id FROM undolog.unfinished_sessions('1997-03-01 00:00+00', '1997-04-01 00:00+00')$$,
    $$SELECT session_id FROM fx WHERE state IN ('active', 'awaiting_approval', 'failed', 'compensating', 'halted')
      ORDER BY session_id$$,
    '... ordered by session id');
SELECT results_eq(
    $$SELECT session_id FROM undolog.unfinished_sessions('1997-04-01 00:00+00', '1997-05-01 00:00+00')$$,
    $$SELECT session_id FROM fx WHERE state = 'active-april'$$,
    'April 1997: only the session with an effect at 00:00 UTC on 1 April');
SELECT is_empty(
    $$SELECT * FROM undolog.unfinished_sessions('1997-03-01 00:00+00', '1997-03-31 23:59:59.999999+00')$$,
    'the range is half-open: an effect at its upper bound is outside');
SELECT is_empty(
    $$SELECT * FROM undolog.unfinished_sessions('1997-05-01 00:00+00', '1997-06-01 00:00+00')$$,
    'a month without effects is held by nobody');
UPDATE undolog.undolog_sessions SET state = 'completed'
WHERE session_id = (SELECT session_id FROM fx WHERE state = 'active-april');
SELECT is_empty(
    $$SELECT * FROM undolog.unfinished_sessions('1997-04-01 00:00+00', '1997-05-01 00:00+00')$$,
    'once its session completes, April is held by nobody');

-- A halted session an operator abandoned (resolved) will never move again: it no longer
-- holds its month.
SELECT undolog.abandon_session((SELECT session_id FROM fx WHERE state = 'halted'),
                               'pgtap', 'written off');
SELECT is_empty(
    $$SELECT FROM undolog.unfinished_sessions('1997-03-01 00:00+00', '1997-04-01 00:00+00') AS u
      WHERE u.session_id = (SELECT session_id FROM fx WHERE state = 'halted')$$,
    'an abandoned halted session no longer holds its month');

SELECT * FROM finish();
ROLLBACK;
