-- Roles and privileges, enumerated from the catalogue rather than listed by hand, so that
-- a function or table added later is covered the day it lands: a new function without a
-- REVOKE from PUBLIC, without a pinned search_path, or granted to the wrong role, and a
-- new table some role could write to, each FAIL here.
--
-- The one hand-written list is the grants of record (pg_temp.allowed below): which group
-- role may call which function. It names the functions of the SQL API (docs/reference/sql.md), including
-- those of other migrations (the undo walk's), which are checked only once they exist.
-- A function granted to a role and not listed here fails: add it to the list on purpose.
BEGIN;

CREATE ROLE ul_t_agent NOLOGIN IN ROLE undolog_agent;
CREATE ROLE ul_t_approver NOLOGIN IN ROLE undolog_approver;
CREATE ROLE ul_t_operator NOLOGIN IN ROLE undolog_operator;

CREATE TEMP TABLE test_role (member name, grp name);
INSERT INTO test_role VALUES
    ('ul_t_agent', 'undolog_agent'),
    ('ul_t_approver', 'undolog_approver'),
    ('ul_t_operator', 'undolog_operator');

CREATE TEMP TABLE allowed (grp name, proname name);
INSERT INTO allowed VALUES
    ('undolog_agent', 'begin_session'),
    ('undolog_agent', 'heartbeat'),
    ('undolog_agent', 'intercept'),
    ('undolog_agent', 'intercept_tool'),
    ('undolog_agent', 'commit'),
    ('undolog_agent', 'fail'),
    ('undolog_agent', 'commit_effect'),
    ('undolog_agent', 'fail_effect'),
    ('undolog_agent', 'complete_session'),
    ('undolog_agent', 'fail_session'),
    ('undolog_agent', 'register_tool'),
    ('undolog_operator', 'register_tool'),
    ('undolog_operator', 'retire_tool'),
    ('undolog_operator', 'replace_tool'),
    ('undolog_agent', 'approval_decision'),
    ('undolog_approver', 'approval_decision'),
    ('undolog_operator', 'approval_decision'),
    ('undolog_agent', 'ending_decision'),
    ('undolog_approver', 'ending_decision'),
    ('undolog_operator', 'ending_decision'),
    ('undolog_approver', 'approve'),
    ('undolog_approver', 'approve_edited'),
    ('undolog_agent', 'approval_edit'),
    ('undolog_approver', 'approval_edit'),
    ('undolog_operator', 'approval_edit'),
    ('undolog_agent', 'delivery_last_error'),
    ('undolog_approver', 'delivery_last_error'),
    ('undolog_operator', 'delivery_last_error'),
    ('undolog_agent', 'edit_changes'),
    ('undolog_approver', 'edit_changes'),
    ('undolog_operator', 'edit_changes'),
    ('undolog_agent', 'is_blank'),
    ('undolog_approver', 'reject'),
    ('undolog_operator', 'ensure_partitions'),
    ('undolog_operator', 'drop_partitions'),
    ('undolog_operator', 'maintain_partitions'),
    ('undolog_operator', 'pending_partitions'),
    ('undolog_approver', 'pending_partitions'),
    -- the metrics view of the finished sessions' volume reads it (its reader needs EXECUTE)
    ('undolog_operator', 'session_state_estimates'),
    ('undolog_approver', 'session_state_estimates'),
    -- metrics_sessions's WHERE: the definition of an unfinished session (reads nothing)
    ('undolog_operator', 'session_unfinished'),
    ('undolog_approver', 'session_unfinished'),
    ('undolog_operator', 'expire_approvals'),
    ('undolog_operator', 'recover'),
    ('undolog_operator', 'fail_expired_sessions'),
    ('undolog_operator', 'claim_compensation'),
    ('undolog_operator', 'complete_compensation'),
    ('undolog_operator', 'fail_compensation'),
    ('undolog_operator', 'resume_session'),
    ('undolog_operator', 'retry_compensation'),
    ('undolog_operator', 'abandon_session'),
    ('undolog_operator', 'expect_session'),
    ('undolog_operator', 'rollback_session'),
    ('undolog_approver', 'rollback_session'),
    ('undolog_operator', 'add_notification_channel'),
    ('undolog_operator', 'remove_notification_channel'),
    ('undolog_operator', 'enqueue_notifications'),
    ('undolog_operator', 'claim_notification'),
    ('undolog_operator', 'finish_notification'),
    ('undolog_operator', 'retry_notification'),
    ('undolog_operator', 'rollback_to'),
    ('undolog_approver', 'rollback_to'),
    ('undolog_agent', 'rollback_to'),
    ('undolog_operator', 'rollback_last'),
    ('undolog_approver', 'rollback_last'),
    ('undolog_agent', 'rollback_last'),
    ('undolog_operator', 'rollback_to_plan'),
    ('undolog_approver', 'rollback_to_plan'),
    ('undolog_agent', 'rollback_to_plan'),
    ('undolog_approver', 'verify_chain'),
    ('undolog_operator', 'verify_chain'),
    ('undolog_approver', 'assert_chain'),
    ('undolog_operator', 'assert_chain'),
    ('undolog_approver', 'chain_events'),
    ('undolog_operator', 'chain_events'),
    ('undolog_operator', 'write_anchor'),
    ('undolog_agent', 'version'),
    ('undolog_approver', 'version'),
    ('undolog_operator', 'version');

-- Every function of the schema, with a call that type-checks: each argument is a typed
-- NULL behind a sub-select. A bare NULL constant would let the planner fold a STRICT
-- function's call to NULL without ever checking the privilege to execute it.
CREATE TEMP TABLE fn AS
SELECT
    p.oid,
    p.proname,
    p.oid::regprocedure::text AS signature,
    format(
        CASE p.prokind WHEN 'p' THEN 'CALL undolog.%I(%s)' ELSE 'SELECT undolog.%I(%s)' END,
        p.proname,
        coalesce((SELECT string_agg(format('(SELECT NULL::%s)', format_type(a.t, NULL)), ', '
                                    ORDER BY a.n)
                  FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a (t, n)), '')
    ) AS call
FROM pg_proc AS p
WHERE p.pronamespace = 'undolog'::regnamespace;

-- Every table (and partition) of the schema, with one statement per kind of write.
-- UPDATE sets a column that may be assigned (not an identity or generated one), so that
-- the only possible refusal is the privilege. The tests match the message too, since a
-- row-level security refusal ("new row violates row-level security policy") is also
-- SQLSTATE 42501 and would otherwise hide a table privilege wrongly granted.
CREATE TEMP TABLE write_stmt AS
SELECT c.oid::regclass::text AS relation, c.relname, w.op, w.stmt
FROM pg_class AS c
CROSS JOIN LATERAL (
    SELECT a.attname FROM pg_attribute AS a
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      AND a.attidentity = '' AND a.attgenerated = ''
    ORDER BY a.attnum LIMIT 1
) AS col
CROSS JOIN LATERAL (VALUES
    ('INSERT', format('INSERT INTO %s DEFAULT VALUES', c.oid::regclass)),
    ('UPDATE', format('UPDATE %s SET %I = %I WHERE false', c.oid::regclass, col.attname,
                      col.attname)),
    ('DELETE', format('DELETE FROM %s WHERE false', c.oid::regclass)),
    ('TRUNCATE', format('TRUNCATE %s', c.oid::regclass))
) AS w (op, stmt)
WHERE c.relnamespace = 'undolog'::regnamespace AND c.relkind IN ('r', 'p');

-- The test roles read these while the tests run as them.
GRANT SELECT ON test_role, allowed, fn, write_stmt TO PUBLIC;

SELECT plan(
    15
    + (SELECT count(*)::int FROM fn CROSS JOIN test_role AS r
       WHERE NOT EXISTS (SELECT FROM allowed AS a
                         WHERE a.grp = r.grp AND a.proname = fn.proname))
    + (SELECT count(*)::int FROM write_stmt) * (SELECT count(*)::int FROM test_role)
);

-- ---------------------------------------------------------------------------------------
-- The group roles themselves.
-- ---------------------------------------------------------------------------------------
SELECT is_empty(
    $$SELECT rolname FROM pg_roles
      WHERE rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')
        AND (rolcanlogin OR rolsuper OR rolbypassrls OR rolcreaterole OR rolcreatedb
             OR rolreplication)$$,
    'the group roles cannot log in and hold no special attribute (bypassrls, superuser, ...)'
);
SELECT is(
    (SELECT count(*)::int FROM pg_roles
     WHERE rolname IN ('undolog_agent', 'undolog_approver', 'undolog_operator')),
    3, 'the install created the three group roles'
);

-- ---------------------------------------------------------------------------------------
-- Functions.
-- ---------------------------------------------------------------------------------------
SELECT cmp_ok((SELECT count(*)::int FROM fn), '>=', 30,
              'the catalogue lists the engine''s functions');

SELECT is_empty(
    $$SELECT p.oid::regprocedure
      FROM pg_proc AS p,
           LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS acl
      WHERE p.pronamespace = 'undolog'::regnamespace
        AND acl.grantee = 0 AND acl.privilege_type = 'EXECUTE'$$,
    'no undolog function is executable by PUBLIC'
);

SELECT is_empty(
    $$SELECT p.oid::regprocedure, p.proconfig
      FROM pg_proc AS p
      WHERE p.pronamespace = 'undolog'::regnamespace AND p.prosecdef
        AND NOT coalesce('search_path=undolog, pg_temp' = ANY (p.proconfig), false)$$,
    'every SECURITY DEFINER function pins search_path = undolog, pg_temp'
);

SELECT is_empty(
    $$SELECT p.oid::regprocedure, r.grp
      FROM pg_proc AS p CROSS JOIN pg_temp.test_role AS r
      WHERE p.pronamespace = 'undolog'::regnamespace AND NOT p.prosecdef
        AND has_function_privilege(r.grp, p.oid, 'EXECUTE')
        -- but is_blank and session_unfinished: they read nothing, and a SECURITY
        -- DEFINER function is never inlined, which is_blank is into check_call's
        -- expression (intercept's checks) and session_unfinished into the WHERE of
        -- metrics_sessions (where it is the predicate of a partial index)
        AND p.oid NOT IN ('undolog.is_blank(text)'::regprocedure,
                          'undolog.session_unfinished(text, timestamptz)'::regprocedure)$$,
    'every function a role may call is SECURITY DEFINER (the roles write no table themselves)'
);

SELECT is_empty(
    $$SELECT r.grp, fn.signature
      FROM pg_temp.fn AS fn CROSS JOIN pg_temp.test_role AS r
      WHERE has_function_privilege(r.grp, fn.oid, 'EXECUTE')
        AND NOT EXISTS (SELECT FROM pg_temp.allowed AS a
                        WHERE a.grp = r.grp AND a.proname = fn.proname)$$,
    'no role may execute a function outside its grants of record'
);

SELECT is_empty(
    $$SELECT a.grp, fn.signature
      FROM pg_temp.allowed AS a JOIN pg_temp.fn AS fn USING (proname)
      WHERE NOT has_function_privilege(a.grp, fn.oid, 'EXECUTE')$$,
    'every role may execute each existing function of its grants of record'
);

-- Each role, calling each function it must not call: permission denied.
SET ROLE ul_t_agent;
SELECT throws_ok(fn.call, '42501', 'permission denied for function ' || fn.proname,
                 'undolog_agent cannot call ' || fn.signature)
FROM pg_temp.fn AS fn
WHERE NOT EXISTS (SELECT FROM pg_temp.allowed AS a
                  WHERE a.grp = 'undolog_agent' AND a.proname = fn.proname)
ORDER BY fn.signature;
RESET ROLE;

SET ROLE ul_t_approver;
SELECT throws_ok(fn.call, '42501', 'permission denied for function ' || fn.proname,
                 'undolog_approver cannot call ' || fn.signature)
FROM pg_temp.fn AS fn
WHERE NOT EXISTS (SELECT FROM pg_temp.allowed AS a
                  WHERE a.grp = 'undolog_approver' AND a.proname = fn.proname)
ORDER BY fn.signature;
RESET ROLE;

SET ROLE ul_t_operator;
SELECT throws_ok(fn.call, '42501', 'permission denied for function ' || fn.proname,
                 'undolog_operator cannot call ' || fn.signature)
FROM pg_temp.fn AS fn
WHERE NOT EXISTS (SELECT FROM pg_temp.allowed AS a
                  WHERE a.grp = 'undolog_operator' AND a.proname = fn.proname)
ORDER BY fn.signature;
RESET ROLE;

-- ---------------------------------------------------------------------------------------
-- Tables, views, sequences.
-- ---------------------------------------------------------------------------------------
SELECT cmp_ok((SELECT count(DISTINCT relation)::int FROM write_stmt), '>=', 10,
              'the catalogue lists the engine''s tables and partitions');

SELECT is_empty(
    $$SELECT c.oid::regclass, r.who, p.priv
      FROM pg_class AS c
      CROSS JOIN (SELECT grp::text FROM pg_temp.test_role UNION ALL SELECT 'public') AS r (who)
      CROSS JOIN (VALUES ('INSERT'), ('UPDATE'), ('DELETE'), ('TRUNCATE'), ('REFERENCES'),
                         ('TRIGGER')) AS p (priv)
      WHERE c.relnamespace = 'undolog'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
        AND has_table_privilege(r.who, c.oid, p.priv)$$,
    'no role (nor PUBLIC) holds a write privilege on any table or view'
);

SELECT is_empty(
    $$SELECT c.oid::regclass, r.who
      FROM pg_class AS c
      CROSS JOIN (SELECT grp::text FROM pg_temp.test_role UNION ALL SELECT 'public') AS r (who)
      WHERE c.relnamespace = 'undolog'::regnamespace AND c.relkind = 'S'
        AND has_sequence_privilege(r.who, c.oid, 'USAGE,UPDATE')$$,
    'no role (nor PUBLIC) may advance or set an undolog sequence'
);

SELECT is_empty(
    $$SELECT c.oid::regclass FROM pg_class AS c
      WHERE c.relnamespace = 'undolog'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
        AND has_table_privilege('public', c.oid, 'SELECT')$$,
    'PUBLIC reads nothing'
);

-- Each role, writing to each table and partition directly: permission denied.
SET ROLE ul_t_agent;
SELECT throws_ok(w.stmt, '42501', 'permission denied for table ' || w.relname,
                 format('undolog_agent cannot %s %s', w.op, w.relation))
FROM pg_temp.write_stmt AS w ORDER BY w.relation, w.op;
RESET ROLE;

SET ROLE ul_t_approver;
SELECT throws_ok(w.stmt, '42501', 'permission denied for table ' || w.relname,
                 format('undolog_approver cannot %s %s', w.op, w.relation))
FROM pg_temp.write_stmt AS w ORDER BY w.relation, w.op;
RESET ROLE;

SET ROLE ul_t_operator;
SELECT throws_ok(w.stmt, '42501', 'permission denied for table ' || w.relname,
                 format('undolog_operator cannot %s %s', w.op, w.relation))
FROM pg_temp.write_stmt AS w ORDER BY w.relation, w.op;
RESET ROLE;

-- ---------------------------------------------------------------------------------------
-- Row-level security is what keeps agents apart (71_rls.sql tests the rows themselves).
-- ---------------------------------------------------------------------------------------
SELECT is_empty(
    $$SELECT c.oid::regclass, r.grp
      FROM pg_class AS c CROSS JOIN pg_temp.test_role AS r
      WHERE c.relnamespace = 'undolog'::regnamespace AND c.relkind IN ('r', 'p')
        AND has_table_privilege(r.grp, c.oid, 'SELECT')
        AND EXISTS (SELECT FROM pg_attribute AS a
                    WHERE a.attrelid = c.oid AND a.attname = 'session_id')
        AND NOT c.relrowsecurity$$,
    'every session table a role can read has row-level security enabled'
);

SELECT is_empty(
    $$SELECT c.oid::regclass FROM pg_class AS c
      WHERE c.relnamespace = 'undolog'::regnamespace AND c.relforcerowsecurity$$,
    'no table FORCEs row-level security: the engine''s functions (run as the owner) see every row'
);

-- Views run with their owner's rights, past row-level security, unless security_invoker:
-- the agent must read none of the owner's-rights views.
SELECT is_empty(
    $$SELECT c.oid::regclass FROM pg_class AS c
      WHERE c.relnamespace = 'undolog'::regnamespace AND c.relkind IN ('v', 'm')
        AND NOT coalesce(c.reloptions @> ARRAY['security_invoker=true'], false)
        AND has_table_privilege('undolog_agent', c.oid, 'SELECT')$$,
    'the agent role can read no view that bypasses row-level security'
);

SELECT * FROM finish();
ROLLBACK;
