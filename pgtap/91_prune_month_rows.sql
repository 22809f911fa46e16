-- undolog.prune_month_rows(p_from, p_to): deletes the undo entries (each call's
-- exactly-once key since migration 0014), their history and the approval rows of the
-- effects whose executed_at lies in [p_from, p_to), through the append-only guards, and
-- nothing else; answers how many rows it deleted. Internal: no group role may call it.
BEGIN;
SELECT plan(11);

\ir _helpers.psql

CREATE FUNCTION pg_temp.plain_rows(p_from timestamptz, p_to timestamptz) RETURNS text LANGUAGE sql AS $$
    SELECT format('undo=%s approvals=%s',
        (SELECT count(*) FROM undolog.undolog_undo_stack AS t WHERE t.executed_at >= p_from AND t.executed_at < p_to),
        (SELECT count(*) FROM undolog.undolog_approval_requests AS t WHERE t.executed_at >= p_from AND t.executed_at < p_to))
$$;

SELECT has_function('undolog', 'prune_month_rows',
                    ARRAY['timestamp with time zone', 'timestamp with time zone'],
                    'undolog.prune_month_rows(timestamptz, timestamptz) exists');
SELECT is_empty(
    $$SELECT r.rolname FROM pg_roles AS r
      WHERE r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND has_function_privilege(r.oid, 'undolog.prune_month_rows(timestamptz, timestamptz)', 'EXECUTE')$$,
    'internal: no group role may call it');

-- One session, effects on both sides of each bound of June 1996.
SELECT FROM (SELECT pg_temp.add_session() AS s) AS x,
     LATERAL (VALUES ('1996-05-31 23:59:59.999999+00'::timestamptz, 'irreversible'),
                     ('1996-06-01 00:00:00+00', 'irreversible'),
                     ('1996-06-15 00:00:00+00', 'compensable'),
                     ('1996-06-30 23:59:59.999999+00', 'compensable'),
                     ('1996-07-01 00:00:00+00', 'compensable')) AS v (at, tier),
     LATERAL pg_temp.add_effect(x.s, v.at, v.tier) AS e;
CREATE TEMP TABLE effects_before AS SELECT * FROM undolog.undolog_effect_log;
-- Undo history for one June entry and the July one (claimed once each, as a walk would).
UPDATE undolog.undolog_undo_stack SET state = 'compensating', attempts = 1,
    claimed_until = now() + interval '1 minute'
WHERE executed_at IN ('1996-06-15 00:00:00+00', '1996-07-01 00:00:00+00');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_history), 2::bigint,
          'setup: two undo entries have history');
SELECT is(pg_temp.plain_rows('1996-06-01+00', '1996-07-01+00'), 'undo=3 approvals=1',
          'setup: June 1996 has 3 undo and 1 approval rows');

-- 3 undo entries, 1 undo history row, 1 approval request (no registry row any more).
SELECT is(undolog.prune_month_rows('1996-06-01+00', '1996-07-01+00'), 5::bigint,
          'pruning June answers 5 rows deleted');
SELECT is((SELECT count(*) FROM undolog.undolog_undo_history AS h
           JOIN undolog.undolog_undo_stack AS u USING (undo_id, session_id)
           WHERE u.executed_at = '1996-07-01 00:00:00+00'), 1::bigint,
          'June''s undo history went with its entries; July''s stays');
SELECT is(pg_temp.plain_rows('1996-06-01+00', '1996-07-01+00'), 'undo=0 approvals=0',
          'June has no undo or approval row left');
SELECT is(pg_temp.plain_rows('1996-05-01+00', '1996-06-01+00'), 'undo=1 approvals=1',
          'May''s last microsecond is untouched');
SELECT is(pg_temp.plain_rows('1996-07-01+00', '1996-08-01+00'), 'undo=1 approvals=0',
          'July''s first instant is untouched');
SELECT set_eq($$SELECT * FROM undolog.undolog_effect_log$$, $$SELECT * FROM effects_before$$,
              'the effects themselves are untouched (their partitions go by DDL)');
SELECT throws_ok($$DELETE FROM undolog.undolog_undo_history$$, 'UL011', NULL,
                 'afterwards the undo history refuses DELETE again');

SELECT * FROM finish();
ROLLBACK;
