-- Every append-only history table refuses UPDATE and DELETE as a statement, even one
-- that would touch no row, for the owner too: a row trigger alone let an empty DELETE
-- succeed on the effect history, the session history and the operator actions.
BEGIN;
SELECT plan(10);

-- WHERE false: no row to touch, so only a statement-level guard can refuse.
SELECT throws_ok(format('DELETE FROM undolog.%I WHERE false', t), 'UL011', NULL,
                 format('an empty DELETE on %s: UL011', t))
FROM unnest(ARRAY['undolog_effect_history', 'undolog_session_history',
                  'undolog_operator_actions', 'undolog_undo_history']) AS t;
SELECT throws_ok(format('UPDATE undolog.%I SET session_id = session_id WHERE false', t),
                 'UL011', NULL, format('an empty UPDATE on %s: UL011', t))
FROM unnest(ARRAY['undolog_effect_history', 'undolog_session_history',
                  'undolog_operator_actions', 'undolog_undo_history']) AS t;

-- Also on tables with no row at all (a fresh install).
SELECT is((SELECT count(*) FROM undolog.undolog_operator_actions), 0::bigint,
          'the operator actions are empty');
SELECT throws_ok('DELETE FROM undolog.undolog_operator_actions', 'UL011', NULL,
                 'DELETE on the empty operator actions: UL011');

SELECT * FROM finish();
ROLLBACK;
