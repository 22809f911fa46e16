-- undolog.utc_month(p_at, p_offset) and undolog.month_start(p_month): the months of the
-- journal are UTC's, whatever the session's TimeZone, and month arithmetic is done on
-- the UTC calendar (never in the session's zone, where DST and month ends shift it).
BEGIN;
SELECT plan(24);

SELECT has_function('undolog', 'utc_month', ARRAY['timestamp with time zone', 'integer'],
                    'undolog.utc_month(timestamptz, integer) exists');
SELECT volatility_is('undolog', 'utc_month', ARRAY['timestamp with time zone', 'integer'],
                     'immutable', 'utc_month is IMMUTABLE');
SELECT has_function('undolog', 'month_start', ARRAY['date'], 'undolog.month_start(date) exists');
SELECT volatility_is('undolog', 'month_start', ARRAY['date'], 'immutable',
                     'month_start is IMMUTABLE');
SELECT is(undolog.utc_month(NULL), NULL::date, 'utc_month(NULL) is NULL');

-- Month boundaries, in UTC, across a leap day.
SET LOCAL TimeZone = 'UTC';
SELECT is(undolog.utc_month('2028-02-29 23:59:59.999999+00'), '2028-02-01'::date,
          'the last microsecond of 29 Feb 2028 (UTC) is in February');
SELECT is(undolog.utc_month('2028-03-01 00:00:00+00'), '2028-03-01'::date,
          '00:00 UTC on 1 Mar 2028 is in March');
SELECT is(undolog.utc_month('2027-02-28 23:59:59.999999+00'), '2027-02-01'::date,
          '28 Feb 2027 (no leap day) is in February');
SELECT is(undolog.utc_month('2026-12-31 23:59:59.999999+00'), '2026-12-01'::date,
          'the last microsecond of 2026 is in December 2026');

-- The session's zone changes how an instant is written, never its month.
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SELECT is(undolog.utc_month('2028-03-01 13:59:59.999999'), '2028-02-01'::date,
          'UTC+14: 1 Mar 13:59:59.999999 local is 29 Feb 23:59:59.999999 UTC: February');
SELECT is(undolog.utc_month('2028-03-01 14:00:00'), '2028-03-01'::date,
          'UTC+14: 1 Mar 14:00 local is 1 Mar 00:00 UTC: March');
SET LOCAL TimeZone = 'America/Los_Angeles';
SELECT is(undolog.utc_month('2028-02-29 15:59:59.999999'), '2028-02-01'::date,
          'Los Angeles (PST): 29 Feb 15:59:59.999999 local is still February in UTC');
SELECT is(undolog.utc_month('2028-02-29 16:00:00'), '2028-03-01'::date,
          'Los Angeles (PST): 29 Feb 16:00 local is already March in UTC');
SELECT is(undolog.utc_month('2026-10-31 17:00:00'), '2026-11-01'::date,
          'Los Angeles (PDT): 31 Oct 17:00 local is November in UTC');

-- Offsets are whole UTC months, even where the session's zone changes offset (DST) or
-- the day does not exist in the target month.
SELECT is(undolog.utc_month('2026-12-01 00:00:00+00', -1), '2026-11-01'::date,
          'Los Angeles: one month before December 2026 (across DST end) is November');
SELECT is(undolog.utc_month('2026-03-31 12:00:00+00', -1), '2026-02-01'::date,
          'one month before 31 Mar is February (no 31 Feb, no slip into March)');
SELECT is(undolog.utc_month('2024-01-15 00:00:00+00', -13), '2022-12-01'::date,
          '-13 months crosses the year back');
SELECT is(undolog.utc_month('2027-11-15 00:00:00+00', 3), '2028-02-01'::date,
          '+3 months crosses the year forward');

-- month_start: midnight UTC of the month's first day, whatever the zone.
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SELECT is(undolog.month_start('2028-02-29'), '2028-02-01 00:00:00+00'::timestamptz,
          'UTC+14: month_start(29 Feb 2028) is 1 Feb 2028 00:00 UTC');
SELECT is(undolog.month_start('2028-03-01'), '2028-03-01 00:00:00+00'::timestamptz,
          'UTC+14: month_start(1 Mar 2028) is 1 Mar 2028 00:00 UTC');
SET LOCAL TimeZone = 'America/Los_Angeles';
SELECT is(undolog.month_start('2026-11-30'), '2026-11-01 00:00:00+00'::timestamptz,
          'Los Angeles: month_start(30 Nov 2026) is 1 Nov 2026 00:00 UTC');
SELECT is(undolog.month_start(undolog.utc_month('2026-10-31 17:00:00')),
          '2026-11-01 00:00:00+00'::timestamptz,
          'month_start(utc_month(t)) is the start of t''s UTC month');
SELECT ok(undolog.month_start(undolog.utc_month(now())) <= now()
          AND now() < undolog.month_start(undolog.utc_month(now(), 1)),
          'now() lies in [start of its UTC month, start of the next)');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r
      WHERE r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND (has_function_privilege(r.oid, 'undolog.utc_month(timestamptz, integer)', 'EXECUTE')
             OR has_function_privilege(r.oid, 'undolog.month_start(date)', 'EXECUTE'))$$,
    'utc_month and month_start are internal: no group role may call them');

SELECT * FROM finish();
ROLLBACK;
