-- undolog.abandon_session: an operator closes a halted session as resolved by hand.
BEGIN;
SELECT plan(32);

-- Helpers for the saga suites (pg_temp: gone with the ROLLBACK). Approvals are simulated
-- with the owner's direct UPDATEs, which the guard triggers still validate.
CREATE FUNCTION pg_temp.sig(p_seed text) RETURNS text LANGUAGE sql IMMUTABLE
AS $$ SELECT encode(sha256(convert_to(p_seed, 'UTF8')), 'hex') $$;

-- Everything the engine writes, as one text: equal before and after = nothing written.
CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql
AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.session_id) FROM undolog.undolog_sessions AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.history_id) FROM undolog.undolog_session_history AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.effect_id) FROM undolog.undolog_effect_log AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.history_id) FROM undolog.undolog_effect_history AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.stack_position) FROM undolog.undolog_undo_stack AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.history_id) FROM undolog.undolog_undo_history AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.action_id) FROM undolog.undolog_operator_actions AS t),
        (SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.approval_id) FROM undolog.undolog_approval_requests AS t)
    ))
$$;

-- Two tests: p_sql raises p_errcode, and it wrote nothing.
CREATE FUNCTION pg_temp.refused(p_sql text, p_errcode text, p_description text)
RETURNS SETOF text LANGUAGE plpgsql
AS $$
DECLARE
    v_before text := pg_temp.fingerprint();
BEGIN
    RETURN NEXT throws_ok(p_sql, p_errcode::char(5), NULL, p_description);
    RETURN NEXT is(pg_temp.fingerprint(), v_before, p_description || ': nothing written');
END
$$;

CREATE FUNCTION pg_temp.new_session() RETURNS uuid LANGUAGE sql
AS $$ SELECT undolog.begin_session() $$;

-- A COMPENSABLE call at step p_step, left p_outcome: committed, failed (reported: the
-- effect is pending again) or executing (the agent died mid-call). Answers its effect id.
CREATE FUNCTION pg_temp.call(
    p_session uuid, p_step integer, p_outcome text DEFAULT 'committed',
    p_compensation jsonb DEFAULT '{"name": "undo_step"}'
) RETURNS uuid LANGUAGE plpgsql
AS $$
DECLARE
    v_effect uuid;
BEGIN
    SELECT i.effect_id INTO v_effect
    FROM undolog.intercept(p_session, p_step, 'step_' || p_step, 'compensable',
                           jsonb_build_object('step', p_step),
                           pg_temp.sig(p_session || '/' || p_step), p_compensation) AS i;
    IF p_outcome = 'committed' THEN
        PERFORM undolog.commit(v_effect, jsonb_build_object('id', p_step));
    ELSIF p_outcome = 'failed' THEN
        PERFORM undolog.fail(v_effect, 'boom');
    END IF;
    RETURN v_effect;
END
$$;

-- An IRREVERSIBLE call at step p_step, left p_outcome:
--   pending   awaiting a decision (session awaiting_approval)
--   rejected  a human rejected it (session awaiting_approval -> compensating)
--   approved  approved, not yet made again (session active)
--   executing approved and running (session active)
--   committed approved, run, committed (session active)
CREATE FUNCTION pg_temp.irreversible(p_session uuid, p_step integer, p_outcome text)
RETURNS uuid LANGUAGE plpgsql
AS $$
DECLARE
    v_effect uuid;
BEGIN
    SELECT i.effect_id INTO v_effect
    FROM undolog.intercept(p_session, p_step, 'irreversible_' || p_step, 'irreversible',
                           jsonb_build_object('step', p_step),
                           pg_temp.sig(p_session || '/' || p_step)) AS i;
    IF p_outcome = 'pending' THEN
        RETURN v_effect;
    END IF;
    UPDATE undolog.undolog_approval_requests AS a
    SET state = CASE p_outcome WHEN 'rejected' THEN 'rejected' ELSE 'approved' END,
        decided_at = now(), decided_by = 'pgtap'
    WHERE a.effect_id = v_effect;
    UPDATE undolog.undolog_effect_log AS e
    SET state = CASE p_outcome WHEN 'rejected' THEN 'rejected' ELSE 'approved' END
    WHERE e.effect_id = v_effect;
    UPDATE undolog.undolog_sessions AS s
    SET state = CASE p_outcome WHEN 'rejected' THEN 'compensating' ELSE 'active' END
    WHERE s.session_id = p_session;
    IF p_outcome IN ('executing', 'committed') THEN
        PERFORM undolog.intercept(p_session, p_step, 'irreversible_' || p_step, 'irreversible',
                                  jsonb_build_object('step', p_step),
                                  pg_temp.sig(p_session || '/' || p_step));
    END IF;
    IF p_outcome = 'committed' THEN
        PERFORM undolog.commit(v_effect, '{"done": true}');
    END IF;
    RETURN v_effect;
END
$$;

CREATE FUNCTION pg_temp.undo_of(p_effect uuid) RETURNS uuid LANGUAGE sql
AS $$ SELECT u.undo_id FROM undolog.undolog_undo_stack AS u WHERE u.effect_id = p_effect $$;

CREATE FUNCTION pg_temp.entry_state(p_effect uuid) RETURNS text LANGUAGE sql
AS $$ SELECT u.state FROM undolog.undolog_undo_stack AS u WHERE u.effect_id = p_effect $$;

CREATE FUNCTION pg_temp.effect_state(p_effect uuid) RETURNS text LANGUAGE sql
AS $$ SELECT e.state FROM undolog.undolog_effect_log AS e WHERE e.effect_id = p_effect $$;

CREATE FUNCTION pg_temp.session_state(p_session uuid) RETURNS text LANGUAGE sql
AS $$ SELECT s.state FROM undolog.undolog_sessions AS s WHERE s.session_id = p_session $$;

-- Claim and answer the claimed effect's step (NULL: no row).
CREATE FUNCTION pg_temp.claim_step(p_session uuid) RETURNS integer LANGUAGE sql
AS $$ SELECT (c.args ->> 'step')::integer FROM undolog.claim_compensation(p_session) AS c $$;

-- The whole walk, each claim completed at once: the steps in the order they were undone.
CREATE FUNCTION pg_temp.walk(p_session uuid) RETURNS integer[] LANGUAGE plpgsql
AS $$
DECLARE
    v_claim record;
    v_steps integer[] := '{}';
BEGIN
    LOOP
        SELECT c.* INTO v_claim FROM undolog.claim_compensation(p_session) AS c;
        EXIT WHEN NOT FOUND;
        PERFORM undolog.complete_compensation(v_claim.undo_id);
        v_steps := v_steps || (v_claim.args ->> 'step')::integer;
    END LOOP;
    RETURN v_steps;
END
$$;

SELECT pg_temp.new_session() AS s1 \gset
SELECT pg_temp.call(:'s1', 1) AS f1 \gset
SELECT pg_temp.irreversible(:'s1', 2, 'committed') AS f2 \gset
SELECT undolog.fail_session(:'s1', 'x');
SELECT pg_temp.walk(:'s1');
SELECT is(pg_temp.session_state(:'s1'), 'halted', 'the session is halted at the barrier');

-- Bad input, each writing nothing.
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s1', '', 'r'), 'UL008',
                       'an empty p_by');
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, NULL, %L)', :'s1', 'r'), 'UL008',
                       'a NULL p_by');
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, NULL)', :'s1', 'ops'), 'UL008',
                       'a NULL reason');
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s1', 'ops', ' '), 'UL008',
                       'a blank reason');
SELECT throws_like(format('SELECT undolog.abandon_session(%L, %L, NULL)', :'s1', 'ops'),
                   'p_reason must say how the session was resolved%', '... the message says why');
SELECT pg_temp.refused('SELECT undolog.abandon_session(gen_random_uuid(), ''ops'', ''r'')', 'UL002',
                       'an unknown session');
SELECT pg_temp.new_session() AS s2 \gset
SELECT undolog.fail_session(:'s2', 'x');
SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s2', 'ops', 'r'), 'UL001',
                       'a failed (not halted) session');

SELECT is(undolog.abandon_session(:'s1', 'alice', 'customer refunded by hand'), 'halted',
          'abandon answers the state: still halted');
SELECT ok((SELECT s.state = 'halted' AND s.resolved_by = 'alice' AND s.resolved_at = now()
                  AND s.resolution = 'customer refunded by hand'
           FROM undolog.undolog_sessions AS s WHERE s.session_id = :'s1'),
          'the session is halted and resolved: by whom, when, how');
SELECT results_eq(
    format($$SELECT action, undo_id, performed_by, reason FROM undolog.undolog_operator_actions
             WHERE session_id = %L$$, :'s1'),
    $$VALUES ('abandon', NULL::uuid, 'alice', 'customer refunded by hand')$$,
    'the decision is recorded'
);
SELECT is(pg_temp.entry_state(:'f1') || '/' || pg_temp.entry_state(:'f2'), 'pending/pending',
          'unfinished entries stay as the record of what was not undone');
SELECT ok(:'s1'::uuid NOT IN (SELECT * FROM undolog.recover()), 'recover does not offer it');

SELECT pg_temp.refused(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s1', 'bob', 'again'), 'UL001',
                       'abandoning twice');
SELECT throws_like(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s1', 'bob', 'again'),
                   '% was abandoned by alice at %', '... says who abandoned it');
SELECT pg_temp.refused(format('SELECT undolog.resume_session(%L, %L)', :'s1', 'bob'), 'UL001',
                       'resuming an abandoned session');
SELECT pg_temp.refused(format('SELECT * FROM undolog.claim_compensation(%L)', :'s1'), 'UL010',
                       'claiming on an abandoned session');

-- The resolution is fixed, even for the owner; and it needs a halted session.
SELECT throws_ok(format($$UPDATE undolog.undolog_sessions SET resolution = 'rewritten' WHERE session_id = %L$$, :'s1'),
                 'UL011', NULL, 'the owner cannot rewrite a resolution');
SELECT throws_ok(format($$UPDATE undolog.undolog_sessions SET state = 'compensating' WHERE session_id = %L$$, :'s1'),
                 '23514', NULL, 'an abandoned session cannot leave halted, even for the owner');
SELECT throws_ok(format($$UPDATE undolog.undolog_sessions SET resolved_by = 'x', resolved_at = now(), resolution = 'y' WHERE session_id = %L$$, :'s2'),
                 '23514', NULL, 'only a halted session can be resolved');

-- Privileges.
SELECT pg_temp.new_session() AS s3 \gset
SELECT pg_temp.irreversible(:'s3', 1, 'committed');
SELECT undolog.fail_session(:'s3', 'x');
SELECT pg_temp.walk(:'s3');
SET LOCAL ROLE undolog_agent;
SELECT throws_ok(format('SELECT undolog.abandon_session(%L, %L, %L)', :'s3', 'eve', 'r'), '42501', NULL,
                 'the agent role cannot abandon a session');
RESET ROLE;
SET LOCAL ROLE undolog_operator;
SELECT is(undolog.abandon_session(:'s3', 'carol', 'done by hand'), 'halted', 'the operator role can');
RESET ROLE;
SELECT ok((SELECT p.prosecdef AND p.proconfig @> ARRAY['search_path=undolog, pg_temp']
                  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc AS p WHERE p.oid = 'undolog.abandon_session(uuid, text, text)'::regprocedure),
          'it is SECURITY DEFINER with a pinned search_path, not executable by PUBLIC');

SELECT * FROM finish();
ROLLBACK;
