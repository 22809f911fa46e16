-- The saga's schema: the undo stack's guard trigger and state machine, the append-only
-- undo history and operator actions, the operator-only effect transition, internal helpers.
BEGIN;
SELECT plan(29);

\ir _helpers.psql


-- The entry state machine, as data.
SELECT results_eq(
    $$SELECT f.s || ' -> ' || t.s
      FROM (VALUES ('pending'), ('compensating'), ('compensated'), ('compensation_failed'), ('skipped')) AS f (s),
           (VALUES ('pending'), ('compensating'), ('compensated'), ('compensation_failed'), ('skipped')) AS t (s)
      WHERE undolog.undo_transition_allowed(f.s, t.s) ORDER BY 1$$,
    $$VALUES ('compensating -> compensated'), ('compensating -> compensation_failed'),
             ('compensating -> pending'), ('compensation_failed -> pending'),
             ('pending -> compensating'), ('pending -> skipped')$$,
    'the undo entry transitions are exactly these'
);
SELECT ok(undolog.effect_transition_allowed('compensable', 'compensation_failed', 'compensating'),
          'an effect may go compensation_failed -> compensating (operator retry) ...');
SELECT ok(NOT undolog.effect_transition_allowed('irreversible', 'compensation_failed', 'compensating'),
          '... only a COMPENSABLE one');
SELECT ok(NOT undolog.effect_transition_allowed('compensable', 'compensation_failed', 'compensated'),
          '... and nowhere else from compensation_failed');
SELECT ok(NOT undolog.effect_transition_allowed('compensable', 'compensated', 'compensating'),
          'compensated stays final');

SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 1) AS f1 \gset
SELECT pg_temp.call(:'s1', 2) AS f2 \gset
SELECT pg_temp.undo_of(:'f1') AS u1 \gset
SELECT pg_temp.undo_of(:'f2') AS u2 \gset
SELECT undolog.fail_session(:'s1', 'x');

-- The guard, for the owner too.
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET state = 'compensated' WHERE undo_id = %L$$, :'u2'),
                 'UL001', 'invalid undo entry transition pending -> compensated',
                 'an entry cannot skip being in flight');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET compensation = '{"name": "other"}' WHERE undo_id = %L$$, :'u2'),
                 'UL011', NULL, 'the compensation of an entry cannot change');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET effect_id = %L WHERE undo_id = %L$$, :'f1', :'u2'),
                 'UL011', NULL, 'the effect of an entry cannot change');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET max_attempts = 99 WHERE undo_id = %L$$, :'u2'),
                 'UL011', NULL, 'the max_attempts of an entry cannot change');
-- The entry holds its call's exactly-once key (migration 0014): a changed signature would
-- let the same call run again under its old one, or make another call replay this one.
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET call_signature = %L WHERE undo_id = %L$$,
                        pg_temp.sig('another call'), :'u2'),
                 'UL011', 'an undo entry''s identity (id, session, position, effect, signature, '
                          'compensation, max_attempts) cannot change',
                 'the signature of an entry cannot change (UL011, naming the signature)');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack AS u
                          SET call_signature = CASE u.undo_id WHEN %1$L THEN %4$L ELSE %3$L END
                          WHERE u.undo_id IN (%1$L, %2$L)$$,
                        :'u1', :'u2', pg_temp.sig(:'s1' || '/1'), pg_temp.sig(:'s1' || '/2')),
                 'UL011', NULL, 'two entries of a session cannot swap their signatures');
SELECT results_eq(
    format($$SELECT effect_id, call_signature FROM undolog.undolog_undo_stack
             WHERE session_id = %L ORDER BY stack_position$$, :'s1'),
    format($$VALUES (%L::uuid, %L::text), (%L, %L)$$,
           :'f1', pg_temp.sig(:'s1' || '/1'), :'f2', pg_temp.sig(:'s1' || '/2')),
    '... each entry keeps the signature its call was journaled under');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET state = 'compensating' WHERE undo_id = %L$$, :'u2'),
                 '23514', NULL, 'an entry cannot be in flight without a claim expiry');
SELECT c.attempt FROM undolog.claim_compensation(:'s1') AS c;
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET attempts = 0 WHERE undo_id = %L$$, :'u2'),
                 'UL011', NULL, 'the attempt count never goes down');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET state = 'skipped' WHERE undo_id = %L$$, :'u2'),
                 'UL001', NULL, 'an entry in flight cannot be skipped');
SELECT lives_ok(format($$UPDATE undolog.undolog_undo_stack SET claimed_until = now() WHERE undo_id = %L$$, :'u2'),
                'the claim expiry may change (no history for it)');
SELECT is((SELECT count(*)::int FROM undolog.undolog_undo_history WHERE undo_id = :'u2'), 1,
          'only the claim is in the history');
SELECT undolog.complete_compensation(:'u2');
SELECT ok((SELECT u.updated_at = now() FROM undolog.undolog_undo_stack AS u WHERE u.undo_id = :'u2'),
          'updated_at follows each change');
SELECT throws_ok(format($$UPDATE undolog.undolog_undo_stack SET state = 'pending' WHERE undo_id = %L$$, :'u2'),
                 'UL001', NULL, 'compensated is final');

-- Append-only tables.
SELECT throws_ok('UPDATE undolog.undolog_undo_history SET detail = NULL', 'UL011', NULL,
                 'the undo history cannot be updated');
SELECT throws_ok('DELETE FROM undolog.undolog_undo_history', 'UL011', NULL,
                 'the undo history cannot be deleted from');
SELECT throws_ok('TRUNCATE undolog.undolog_undo_history', 'UL011', NULL,
                 'the undo history cannot be truncated');
INSERT INTO undolog.undolog_operator_actions (session_id, action, performed_by) VALUES (:'s1', 'resume', 'x');
SELECT throws_ok('UPDATE undolog.undolog_operator_actions SET reason = ''r''', 'UL011', NULL,
                 'operator actions cannot be updated');
SELECT throws_ok('DELETE FROM undolog.undolog_operator_actions', 'UL011', NULL,
                 'operator actions cannot be deleted');
SELECT throws_ok('TRUNCATE undolog.undolog_operator_actions', 'UL011', NULL,
                 'operator actions cannot be truncated');

-- Nobody but the owner touches the new tables; internal helpers have no grant.
SELECT is_empty(
    $$SELECT r.rolname, c.relname, p.privilege_type
      FROM pg_class AS c
      CROSS JOIN LATERAL aclexplode(c.relacl) AS p
      JOIN pg_roles AS r ON r.oid = p.grantee
      WHERE c.oid IN ('undolog.undolog_undo_history'::regclass, 'undolog.undolog_operator_actions'::regclass)
        AND r.rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND p.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')$$,
    'no group role may write the undo history or the operator actions'
);
SELECT ok(NOT has_table_privilege('public', 'undolog.undolog_undo_history', 'SELECT')
          AND NOT has_table_privilege('public', 'undolog.undolog_operator_actions', 'SELECT'),
          'PUBLIC cannot read them');
SELECT is_empty(
    $$SELECT p.oid::regprocedure, r.rolname
      FROM pg_proc AS p
      CROSS JOIN LATERAL aclexplode(p.proacl) AS a
      JOIN pg_roles AS r ON r.oid = a.grantee
      WHERE p.oid IN ('undolog.lock_undo_entry(uuid)'::regprocedure,
                      'undolog.halt_walk(uuid, uuid, text)'::regprocedure,
                      'undolog.give_up_compensation(undolog.undolog_undo_stack, text)'::regprocedure,
                      'undolog.lock_halted_session(uuid)'::regprocedure,
                      'undolog.setting_interval(text, interval)'::regprocedure,
                      'undolog.setting_integer(text, integer, integer, integer)'::regprocedure,
                      'undolog.retry_delay(integer, interval, interval)'::regprocedure,
                      'undolog.check_operator(text)'::regprocedure,
                      'undolog.undo_transition_allowed(text, text)'::regprocedure)
        AND a.privilege_type = 'EXECUTE' AND r.rolname <> current_user$$,
    'internal helpers are executable by nobody but the owner'
);
SELECT is_empty(
    $$SELECT p.oid::regprocedure
      FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
      WHERE n.nspname = 'undolog' AND p.prosecdef
        AND NOT coalesce(p.proconfig @> ARRAY['search_path=undolog, pg_temp'], false)$$,
    'every SECURITY DEFINER function pins its search_path'
);
-- Which role may execute which function: the grants of record in 70_privileges.sql.

SELECT * FROM finish();
ROLLBACK;
