-- undolog.begin_session: start a session, or resume it. A new session is active with a
-- lease of p_lease; an existing active one has its lease renewed; a session in any other
-- state is answered unchanged (its committed calls still replay; new calls are refused).
-- Another login's session is refused (42501), unless the caller is an approver/operator,
-- who is answered it unchanged, and holds nothing of it.
-- A new session is refused (UL031) when the caller's login already has
-- undolog.max_live_sessions() unfinished sessions; an existing one is answered as before,
-- at the bound too (a heartbeat or a resumed agent must not fail for its own sessions).
CREATE OR REPLACE FUNCTION undolog.begin_session(
    p_session_id uuid DEFAULT NULL,
    p_agent text DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}',
    p_lease interval DEFAULT '5 minutes'
)
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session_id uuid := coalesce(p_session_id, gen_random_uuid());
    v_owner_role text;
    v_max_live integer;
    v_live integer;
BEGIN
    IF p_lease IS NULL OR p_lease < interval '1 second' OR p_lease > interval '1 day' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('lease must be between 1 second and 1 day, not %s',
                                        coalesce(p_lease::text, 'NULL')),
            HINT = 'Pass a lease from ''1 second'' to ''1 day'' (the default is 5 minutes); a '
                   'long-running agent renews it with undolog.heartbeat.';
    END IF;
    IF length(p_agent) > 200 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'agent must be at most 200 characters',
            HINT = 'Name the agent in at most 200 characters; put longer details in metadata.';
    END IF;
    IF p_metadata IS NULL OR jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('metadata must be a JSON object, not %s',
                                        coalesce(jsonb_typeof(p_metadata), 'NULL')),
            HINT = 'Pass metadata as a JSON object, e.g. ''{"task": "refund"}'', or leave it out.';
    END IF;
    PERFORM undolog.check_payload('metadata', p_metadata);

    -- The bound on a login's unfinished sessions, checked before anything is written so
    -- that a refusal leaves no row behind. Counting stops at the bound, through
    -- undolog_sessions_owner_live_idx, whose predicate undolog.session_unfinished is once
    -- inlined: at most that many index entries, a few for a login with a few live
    -- sessions. Per transaction, not exact across them: a count sees the committed
    -- sessions and its own transaction's, so K transactions of one login open at once
    -- may each begin up to the bound (K times it in all; a role's CONNECTION LIMIT
    -- bounds K). Exact would mean one lock every begin of a login waits for, and a
    -- flood is bounded all the same.
    IF p_session_id IS NULL OR NOT EXISTS (
        SELECT FROM undolog.undolog_sessions AS s WHERE s.session_id = p_session_id
    ) THEN
        v_max_live := undolog.max_live_sessions();
        SELECT pg_catalog.count(*) INTO v_live
        FROM (SELECT
              FROM undolog.undolog_sessions AS s
              WHERE s.owner_role = session_user
                AND undolog.session_unfinished(s.state, s.resolved_at)
              LIMIT v_max_live) AS l;
        IF v_live >= v_max_live THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL031',
                MESSAGE = pg_catalog.format('%s already has %s unfinished sessions',
                                            session_user, v_live),
                DETAIL = pg_catalog.format('A login may have at most %s sessions unfinished '
                                           'at once (undolog.max_live_sessions); this session '
                                           'was not begun.', v_max_live),
                HINT = 'Complete or fail some of its sessions and let the worker undo the '
                       'failed ones (undolog health shows its lag), then begin again; an '
                       'operator may raise the bound: ALTER DATABASE <db> SET '
                       'undolog.max_live_sessions = <n>.';
        END IF;
    END IF;

    -- An existing session is renewed by an UPDATE of the caller's own active session
    -- alone, not by ON CONFLICT DO UPDATE: that locks the row it conflicts with even when
    -- its WHERE then leaves it alone, so that an approver or operator that is an agent
    -- too (answered without an error below) held another login's session for as long as
    -- its transaction stayed open: the owner's heartbeats and calls refused (UL030), the
    -- sweep skipping it as busy until its lease had run out.
    INSERT INTO undolog.undolog_sessions AS s
        (session_id, agent, metadata, lease_duration, lease_expires_at)
    VALUES (v_session_id, p_agent, p_metadata, p_lease, undolog.utc_after(now(), p_lease))
    ON CONFLICT (session_id) DO NOTHING
    RETURNING s.owner_role INTO v_owner_role;
    IF NOT FOUND THEN
        UPDATE undolog.undolog_sessions AS s
        SET lease_duration = p_lease, lease_expires_at = undolog.utc_after(now(), p_lease)
        WHERE s.session_id = v_session_id AND s.state = 'active'
          AND s.owner_role = session_user
        RETURNING s.owner_role INTO v_owner_role;
    END IF;
    IF NOT FOUND THEN  -- an existing session, not resumed: is it even the caller's?
        SELECT s.owner_role INTO v_owner_role FROM undolog.undolog_sessions AS s
        WHERE s.session_id = v_session_id;
        PERFORM undolog.check_session_actor(v_session_id, v_owner_role);
    END IF;
    RETURN v_session_id;
END
$$;

REVOKE ALL ON FUNCTION undolog.begin_session(uuid, text, jsonb, interval) FROM public;
