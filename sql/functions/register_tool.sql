-- undolog.register_tool: declare a journaled tool of an agent login, with its tier and,
-- for a compensable tool, the compensation the undo walk runs for it (name, static args,
-- max_attempts). intercept refuses calls naming no live registration of the session's
-- owner (UL017) and takes the compensation from the registration, so the agent never
-- chooses what its call's tier is or what undoes it. Answers the tool_id.
-- The owner is the caller's login (session_user), or p_owner when the caller is an
-- operator: an operator may pin an agent login's tools before that agent first runs.
-- Idempotent: the same definition answers the live registration's tool_id. A different
-- tier or compensation for a live registration is refused (UL018): only an operator may
-- change what a tool does, by replacing it (replace_tool: retired, recorded, and
-- registered again in one transaction; retired alone, it is its owner's again).
-- UL006/UL007/UL008/UL009 as for intercept (check_tool validates the definition).
-- p_on_reject says what a human's refusal of an IRREVERSIBLE tool's call does to the
-- session: 'fail_session' (the default: the undo walk runs) or 'continue' (the refusal is
-- recorded and the session stays active; decide_approval). It is part of the definition
-- (UL018 when it differs); any other value, or 'continue' for a non-irreversible tool,
-- is UL008.
CREATE OR REPLACE FUNCTION undolog.register_tool(
    p_tool_name text,
    p_tier text,
    p_compensation jsonb DEFAULT NULL,
    p_owner text DEFAULT NULL,
    p_on_reject text DEFAULT 'fail_session'
)
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_owner text := coalesce(p_owner, session_user);
    v_compensation jsonb;
    -- Scalars, not a %ROWTYPE of the registry (see intercept).
    v_tool_id uuid;
    v_tool_tier text;
    v_tool_compensation jsonb;
    v_tool_on_reject text;
    v_inserted boolean := FALSE;
    v_bound record;
BEGIN
    -- The tool's part of a call, checked by the very rules intercept applies to a call
    -- (check_call's own), once: intercept_tool's calls of it are not checked again.
    PERFORM undolog.check_tool(p_tool_name, p_tier, p_compensation);
    IF p_on_reject IS NULL OR p_on_reject NOT IN ('fail_session', 'continue') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('on_reject must be ''fail_session'' or ''continue'', '
                                        'not %s', coalesce(pg_catalog.quote_literal(p_on_reject),
                                                           'NULL')),
            HINT = '''fail_session'' (the default) undoes the session when a human rejects '
                   'the call; ''continue'' records the rejection and keeps the session active.';
    END IF;
    IF p_on_reject = 'continue' AND p_tier <> 'irreversible' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('on_reject ''continue'' is for an irreversible tool; '
                                        '%s is %s', p_tool_name, p_tier),
            HINT = 'Only an irreversible call waits for a human who may reject it: leave '
                   'on_reject at ''fail_session''.';
    END IF;
    IF v_owner IS DISTINCT FROM session_user THEN
        IF NOT pg_catalog.pg_has_role(session_user, 'undolog_operator', 'MEMBER') THEN
            RAISE EXCEPTION USING
                ERRCODE = '42501',
                MESSAGE = pg_catalog.format('only an operator may register a tool for %s',
                                            p_owner),
                HINT = 'An agent registers its own tools: leave p_owner NULL.';
        END IF;
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname = v_owner) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL008',
                MESSAGE = pg_catalog.format('p_owner %s is not a role', p_owner),
                HINT = 'Create the login first (CREATE ROLE ... LOGIN IN ROLE undolog_agent), or '
                       'name an existing one.';
        END IF;
    END IF;
    -- One stored form: args always present (an empty object when none), max_attempts
    -- only when given, so that equal definitions compare equal.
    IF p_compensation IS NOT NULL THEN
        v_compensation := pg_catalog.jsonb_build_object(
            'name', p_compensation -> 'name',
            'args', coalesce(p_compensation -> 'args', '{}'::jsonb))
            || CASE WHEN p_compensation ? 'max_attempts'
                    THEN pg_catalog.jsonb_build_object('max_attempts',
                                                       p_compensation -> 'max_attempts')
                    ELSE '{}'::jsonb END;
    END IF;

    -- The live registration in the insert's way is read by a statement of its own, which
    -- sees what committed since: one an operator retired in between is not there any
    -- more, and the insert is made again (it then finds the way free, or a newer one).
    -- The insert waits for another transaction registering the same tool of the same
    -- owner (the agent's own, or an operator's) until it ends: bounded as a session's
    -- lock is (undolog.bound_lock_wait), so that an agent's transaction kept open after
    -- its register_tool does not hold an operator's replace_tool for ever.
    v_bound := undolog.bound_lock_wait();
    BEGIN
        LOOP
            INSERT INTO undolog.undolog_tools AS t
                (owner_role, tool_name, tier, compensation, on_reject)
            VALUES (v_owner, p_tool_name, p_tier, v_compensation, p_on_reject)
            ON CONFLICT (owner_role, tool_name) WHERE retired_at IS NULL DO NOTHING
            RETURNING t.tool_id INTO v_tool_id;
            v_inserted := FOUND;
            EXIT WHEN v_inserted;
            SELECT t.tool_id, t.tier, t.compensation, t.on_reject
            INTO v_tool_id, v_tool_tier, v_tool_compensation, v_tool_on_reject
            FROM undolog.undolog_tools AS t
            WHERE t.owner_role = v_owner AND t.tool_name = p_tool_name AND t.retired_at IS NULL;
            EXIT WHEN FOUND;
        END LOOP;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL030',
            MESSAGE = pg_catalog.format('tool %s of %s is being registered by a transaction '
                                        'that has not ended', p_tool_name, v_owner),
            DETAIL = pg_catalog.format('Waited %s for it. Nothing was changed.', v_bound.p_wait),
            HINT = pg_catalog.format('Try again. If it stays held, end that transaction: its '
                                     'backend is in pg_stat_activity, idle in transaction, '
                                     'most likely under the login %s (pg_terminate_backend).',
                                     v_owner);
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
    IF v_inserted THEN
        RETURN v_tool_id;
    END IF;
    IF (v_tool_tier, v_tool_compensation, v_tool_on_reject)
       IS DISTINCT FROM (p_tier, v_compensation, p_on_reject) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL018',
            MESSAGE = pg_catalog.format('tool %s of %s is registered differently',
                                        p_tool_name, v_owner),
            DETAIL = pg_catalog.format('registered: tier %s, compensation %s, on_reject %s; '
                                       'asked: tier %s, compensation %s, on_reject %s',
                                       v_tool_tier, coalesce(v_tool_compensation::text, 'none'),
                                       v_tool_on_reject, p_tier,
                                       coalesce(v_compensation::text, 'none'), p_on_reject),
            HINT = pg_catalog.format('An operator replaces tool_id %s in one transaction: '
                                     'undolog.replace_tool (undolog tools register --replace, '
                                     'or the dashboard''s register form with replace checked).',
                                     v_tool_id);
    END IF;
    RETURN v_tool_id;
END
$$;

REVOKE ALL ON FUNCTION undolog.register_tool(text, text, jsonb, text, text) FROM public;
