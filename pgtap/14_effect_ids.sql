-- undolog.effect_id_at(p_at) and undolog.effect_time(p_effect_id) (migration 0014): a new
-- effect's id carries its executed_at to the microsecond, so commit_effect addresses the
-- effect log's row by its primary key with no lookup first. An id that carries no such
-- time (an effect journaled before 0014, a forged id) is still committed or refused
-- through the undo stack, where the call's exactly-once key now lives.
BEGIN;
SELECT plan(22);
\ir _helpers.psql

SELECT volatility_is('undolog', 'effect_time', ARRAY['uuid'], 'immutable',
                     'effect_time is IMMUTABLE (run-time partition pruning may use it)');
SELECT volatility_is('undolog', 'effect_id_at', ARRAY['timestamp with time zone'], 'volatile',
                     'effect_id_at is VOLATILE (random bits)');

-- Exact to the microsecond, across month and year ends, whole milliseconds and seconds,
-- and whatever the session's zone.
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SELECT is(
    (SELECT count(*) FROM (VALUES
        ('2026-12-31 23:59:59.999999+00'::timestamptz), ('2027-01-01 00:00:00+00'),
        ('2028-02-29 12:34:56.000001+00'), ('2026-12-04 20:00:00.123+00'),
        ('2026-12-04 20:00:00.999+00'), ('1999-12-31 23:59:59.5+00')) AS v (at)
     WHERE undolog.effect_time(undolog.effect_id_at(v.at)) IS DISTINCT FROM v.at),
    0::bigint, 'effect_time reads back exactly the time effect_id_at was given');
SELECT is(
    (SELECT count(*) FROM generate_series(1, 2000) AS g,
         LATERAL (SELECT pg_catalog.clock_timestamp() - g * interval '37.000123 seconds' AS at) AS t
     WHERE undolog.effect_time(undolog.effect_id_at(t.at)) IS DISTINCT FROM t.at),
    0::bigint, '2,000 microsecond-precise times round-trip');
SELECT is(substr(undolog.effect_id_at(now())::text, 15, 1), '7', 'the id is version 7');
SELECT ok(substr(undolog.effect_id_at(now())::text, 20, 1) IN ('8', '9', 'a', 'b'),
          'the id has the RFC 9562 variant (10xx)');
SELECT is((SELECT count(DISTINCT undolog.effect_id_at('2026-12-04 20:00:00+00'))
           FROM generate_series(1, 5000)), 5000::bigint,
          'ids made for one instant differ (62 random bits)');
SELECT ok(undolog.effect_id_at('2026-12-04 20:00:00.000001+00')
          > undolog.effect_id_at('2026-12-04 20:00:00+00'),
          'a later microsecond sorts after (the right edge of an index)');
SELECT is(undolog.effect_time(NULL), NULL, 'effect_time(NULL) is NULL');

-- A new call: its id carries its executed_at; commit_effect finds it by that.
SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.tool('pay', 'compensable', '{"name": "refund"}') AS pay \gset
SELECT i.effect_id AS e1 FROM undolog.intercept_tool(:'s1', :'pay', 0, '{"n": 1}',
                                                   pg_temp.sig('ids-1')) AS i \gset
SELECT is(undolog.effect_time(:'e1'),
          (SELECT executed_at FROM undolog.undolog_effect_log WHERE effect_id = :'e1'),
          'a journaled call''s id carries its executed_at');
SELECT is((SELECT executed_at FROM undolog.undolog_effect_log WHERE effect_id = :'e1'), now(),
          'executed_at is still the intercepting transaction''s time');
SELECT is(undolog.commit_effect(:'s1', :'e1', '{"ok": 1}'), 'committed',
          'commit_effect commits it');

-- An effect whose id carries no time (journaled before 0014: a uuid_v7, or a random id)
-- is still committed, through the undo stack's effect key.
SELECT pg_temp.add_session('active') AS s2 \gset
INSERT INTO undolog.undolog_undo_stack (session_id, effect_id, executed_at, call_signature,
                                        compensation)
VALUES (:'s2', undolog.uuid_v7(), now() - interval '3 seconds', pg_temp.sig('ids-old'),
        '{"name": "refund"}')
RETURNING effect_id AS e_old, executed_at AS at_old \gset
INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at, call_signature,
                                        step_index, tool_name, tier, args, state, attempts,
                                        events_in_row)
VALUES (:'e_old', :'s2', :'at_old', pg_temp.sig('ids-old'), 0, 'pay', 'compensable', '{}',
        'executing', 1, FALSE);
SELECT isnt(undolog.effect_time(:'e_old'), :'at_old'::timestamptz,
            'setup: an old id does not carry its executed_at');
SELECT is(undolog.commit_effect(:'s2', :'e_old', '{"ok": 2}'), 'committed',
          'an old effect is committed all the same');
SELECT is((SELECT state FROM undolog.undolog_effect_log WHERE effect_id = :'e_old'), 'committed',
          'its row is committed');

-- Ids no one issued: one that carries a real effect's time, one of another session.
SELECT throws_ok(format('SELECT undolog.commit_effect(%L, %L, ''{}'')', :'s1',
                        undolog.effect_id_at(now())),
                 'UL003', NULL, 'an id carrying a real time but no effect: UL003');
SELECT throws_ok(format('SELECT undolog.commit_effect(%L, %L, ''{}'')', :'s2', :'e1'),
                 'UL003', NULL, 'another session''s effect: UL003');
SELECT throws_ok(format('SELECT undolog.fail_effect(%L, %L, ''boom'')', :'s2', :'e1'),
                 'UL003', NULL, 'fail_effect of another session''s effect: UL003');

-- The exactly-once key lives in the undo stack now: no one deletes it, the owner included,
-- and a call made again still replays.
SELECT throws_ok(format('DELETE FROM undolog.undolog_undo_stack WHERE effect_id = %L', :'e1'),
                 'UL011', NULL, 'DELETE of an undo entry (its call''s key): UL011');
SELECT throws_ok('DELETE FROM undolog.undolog_undo_stack WHERE false', 'UL011', NULL,
                 'an empty DELETE on the undo stack: UL011 (a statement guard)');
SELECT throws_ok('TRUNCATE undolog.undolog_undo_stack', 'UL011', NULL,
                 'TRUNCATE of the undo stack: UL011');
SELECT results_eq(
    format($$SELECT i.action, i.effect_id FROM undolog.intercept_tool(%L, %L, 0, '{"n": 1}',
                                                                     pg_temp.sig('ids-1')) AS i$$,
           :'s1', :'pay'),
    format($$VALUES ('replay', %L::uuid)$$, :'e1'),
    'the call made again replays its one effect');

SELECT * FROM finish();
ROLLBACK;
