-- plpgsql_check over every PL/pgSQL function of the engine, as one test: any error or
-- warning it reports (unknown columns, type mismatches, dead code, ...) fails it.
-- Trigger functions are checked against the table they are bound to.
BEGIN;
SELECT plan(2);

SELECT cmp_ok(
    (SELECT count(*)::int FROM pg_proc AS p
     JOIN pg_namespace AS n ON n.oid = p.pronamespace
     JOIN pg_language AS l ON l.oid = p.prolang
     WHERE n.nspname = 'undolog' AND l.lanname = 'plpgsql'),
    '>', 10,
    'the engine has PL/pgSQL functions to check'
);

SELECT is_empty(
    $$
    WITH fn AS (
        SELECT p.oid, p.prorettype = 'trigger'::regtype AS is_trigger
        FROM pg_proc AS p
        JOIN pg_namespace AS n ON n.oid = p.pronamespace
        JOIN pg_language AS l ON l.oid = p.prolang
        WHERE n.nspname = 'undolog' AND l.lanname = 'plpgsql'
    ),
    target AS (
        SELECT fn.oid,
               CASE WHEN fn.is_trigger THEN
                   (SELECT t.tgrelid FROM pg_trigger AS t
                    WHERE t.tgfoid = fn.oid ORDER BY t.tgrelid LIMIT 1)
               ELSE 0 END AS relid
        FROM fn
    )
    SELECT target.oid::regprocedure, c.lineno, c.message
    FROM target,
         LATERAL plpgsql_check_function_tb(
             target.oid, coalesce(target.relid, 0),
             fatal_errors => false, extra_warnings => true,
             performance_warnings => false
         ) AS c
    WHERE c.level IN ('error', 'warning', 'warning extra')
    $$,
    'plpgsql_check finds no error or warning in any undolog function'
);

SELECT * FROM finish();
ROLLBACK;
