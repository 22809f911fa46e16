-- Object shadowing (docs/design/roles.md): no function of the engine finds a relation,
-- function, operator or type of its own through search_path. A SECURITY DEFINER function
-- pins search_path = undolog, pg_temp, where pg_temp comes last, so a login's temporary
-- table of a name the function meant in undolog is not picked; but a name found in
-- neither pg_catalog nor undolog would be looked for in the caller's pg_temp, and a
-- SECURITY INVOKER function (an inlined SQL function: is_blank, session_unfinished; a
-- trigger) resolves with whatever search_path is in force where it runs.
--
-- Checked mechanically: each function is made again in a scratch schema without its
-- SET search_path, and its body resolved with search_path = '' (pg_catalog alone, then
-- pg_temp for relations): SQL bodies when they are created (check_function_bodies),
-- PL/pgSQL bodies by plpgsql_check. Every name not in pg_catalog must then be written
-- undolog.name, or it fails here. Dynamic SQL (EXECUTE) is not seen: the partitions'
-- functions that use it name a table as undolog.%I, or by its regclass (printed bare
-- only when undolog's is the one search_path finds).
BEGIN;
SELECT plan(3);

CREATE SCHEMA ul_t_scratch;
CREATE TEMP TABLE unresolved (fn text, problem text, language text);
CREATE TEMP TABLE remade (n integer);

DO $$
DECLARE
    v_fn record;
    v_def text;
    v_found record;
    v_path text := pg_catalog.current_setting('search_path');
BEGIN
    PERFORM pg_catalog.set_config('check_function_bodies', 'on', true);
    PERFORM pg_catalog.set_config('search_path', '', true);
    FOR v_fn IN
        SELECT p.oid, p.oid::regprocedure::text AS signature, l.lanname
        FROM pg_catalog.pg_proc AS p
        JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
        WHERE p.pronamespace = 'undolog'::regnamespace AND l.lanname IN ('sql', 'plpgsql')
    LOOP
        v_def := pg_catalog.regexp_replace(
            pg_catalog.pg_get_functiondef(v_fn.oid),
            '^CREATE OR REPLACE FUNCTION undolog\.', 'CREATE FUNCTION ul_t_scratch.');
        v_def := pg_catalog.regexp_replace(v_def, '^ SET search_path TO [^\n]*\n', '', 'n');
        BEGIN
            EXECUTE v_def;  -- an SQL body is resolved here
        EXCEPTION WHEN OTHERS THEN
            INSERT INTO pg_temp.unresolved VALUES (v_fn.signature, SQLERRM, v_fn.lanname);
        END;
    END LOOP;
    INSERT INTO pg_temp.remade
    SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc AS p
    WHERE p.pronamespace = 'ul_t_scratch'::regnamespace;
    -- a PL/pgSQL body by plpgsql_check (a trigger's against a table it is bound to)
    FOR v_found IN
        SELECT p.oid::regprocedure::text AS signature, c.lineno, c.message
        FROM pg_catalog.pg_proc AS p
        JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang,
             LATERAL public.plpgsql_check_function_tb(
                 p.oid,
                 CASE WHEN p.prorettype = 'trigger'::regtype THEN
                     coalesce((SELECT t.tgrelid FROM pg_catalog.pg_trigger AS t
                               JOIN pg_catalog.pg_proc AS o ON o.oid = t.tgfoid
                               WHERE o.pronamespace = 'undolog'::regnamespace
                                 AND o.proname = p.proname
                               ORDER BY t.tgrelid LIMIT 1), 0)
                 ELSE 0 END,
                 fatal_errors => false, extra_warnings => false,
                 performance_warnings => false
             ) AS c
        WHERE p.pronamespace = 'ul_t_scratch'::regnamespace AND l.lanname = 'plpgsql'
          AND c.level = 'error'
    LOOP
        INSERT INTO pg_temp.unresolved
        VALUES (v_found.signature,
                pg_catalog.format('line %s: %s', v_found.lineno, v_found.message), 'plpgsql');
    END LOOP;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END
$$;

SELECT cmp_ok(
    (SELECT n FROM pg_temp.remade), '>', 100,
    'the engine''s functions were made again without their search_path'
);

SELECT is_empty(
    $$SELECT fn, problem FROM pg_temp.unresolved WHERE language = 'sql'$$,
    'every SQL function body resolves with search_path = '''' (a name outside pg_catalog '
    || 'is written undolog.name)'
);

SELECT is_empty(
    $$SELECT fn, problem FROM pg_temp.unresolved WHERE language = 'plpgsql'$$,
    'every PL/pgSQL function body resolves with search_path = '''' (a name outside '
    || 'pg_catalog is written undolog.name)'
);

SELECT * FROM finish();
ROLLBACK;
