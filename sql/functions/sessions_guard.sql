-- undolog.sessions_guard: AFTER INSERT and BEFORE UPDATE on undolog_sessions.
-- Enforces the session state machine and identity columns, stamps every change of the
-- row with a later updated_at, and appends every state change to
-- undolog_session_history, whoever makes it. The creation is recorded AFTER
-- INSERT: a BEFORE INSERT trigger also fires for begin_session's INSERT ... ON CONFLICT
-- that resumes an existing session, and would record a creation that did not happen.
CREATE OR REPLACE FUNCTION undolog.sessions_guard()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'active' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL001',
                MESSAGE = pg_catalog.format('a session starts active, not %s', NEW.state),
                HINT = 'The journal changes only through undolog''s functions, and none of them '
                       'asks for this: if one did, report it as a bug with the statement. Nothing '
                       'was changed.';
        END IF;
    ELSE
        IF (NEW.session_id, NEW.owner_role, NEW.created_at)
           IS DISTINCT FROM (OLD.session_id, OLD.owner_role, OLD.created_at) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL011',
                MESSAGE = 'a session''s identity (session_id, owner_role, created_at) cannot change',
                HINT = 'The journal changes only through undolog''s functions, and none of them '
                       'asks for this: if one did, report it as a bug with the statement. Nothing '
                       'was changed.';
        END IF;
        -- Every version of the row gets a later updated_at than the one before, never
        -- an equal one: now() is when the transaction began, the same for every change it
        -- makes, and two transactions may begin in the same microsecond; expect_session
        -- tells the version an operator read by this value alone. now(), unless that
        -- would not move it on (then a microsecond past the old one).
        NEW.updated_at := greatest(now(), OLD.updated_at + interval '1 microsecond');
        IF NEW.state = OLD.state THEN
            RETURN NEW;
        END IF;
        IF NOT undolog.session_transition_allowed(OLD.state, NEW.state) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL001',
                MESSAGE = pg_catalog.format('invalid session transition %s -> %s',
                                            OLD.state, NEW.state),
                DETAIL = pg_catalog.format('session %s', NEW.session_id),
                HINT = 'The journal changes only through undolog''s functions, and none of them '
                       'asks for this: if one did, report it as a bug with the statement. Nothing '
                       'was changed.';
        END IF;
        -- A partial walk (rollback_to) starts with its floor and ends only from one: an
        -- active session is never sent to its walk, nor a walk back to active, otherwise.
        -- The floor is read through to_jsonb: the column comes with migration 0009, and
        -- an upgrade applies this source before it (a field the record lacks would raise).
        IF (OLD.state = 'active' AND NEW.state = 'compensating'
            AND pg_catalog.to_jsonb(NEW) ->> 'undo_floor' IS NULL)
           OR (OLD.state = 'compensating' AND NEW.state = 'active'
               AND (pg_catalog.to_jsonb(OLD) ->> 'undo_floor' IS NULL
                    OR pg_catalog.to_jsonb(NEW) ->> 'undo_floor' IS NOT NULL)) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL001',
                MESSAGE = pg_catalog.format('invalid session transition %s -> %s',
                                            OLD.state, NEW.state),
                DETAIL = pg_catalog.format('session %s', NEW.session_id),
                HINT = 'Only undolog.rollback_to starts a partial undo walk, and only its '
                       'end sends the session back to active.';
        END IF;
    END IF;

    INSERT INTO undolog.undolog_session_history (session_id, from_state, to_state, detail)
    VALUES (
        NEW.session_id,
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END,
        NEW.state,
        CASE WHEN NEW.error IS NOT NULL AND NEW.state IN ('failed', 'halted')
            THEN pg_catalog.jsonb_build_object('error', NEW.error)
        -- A partial walk: who asked, why and down to which step, when it starts and ends.
        WHEN TG_OP = 'UPDATE' AND OLD.state = 'active' AND NEW.state = 'compensating'
            THEN pg_catalog.jsonb_build_object('rollback_to', pg_catalog.to_jsonb(NEW) -> 'undo_to')
        WHEN TG_OP = 'UPDATE' AND OLD.state = 'compensating' AND NEW.state = 'active'
            THEN pg_catalog.jsonb_build_object('rolled_back_to',
                                               pg_catalog.to_jsonb(NEW) -> 'undo_to')
        -- Back to active after a refusal of a tool registered on_reject 'continue': which
        -- calls were refused, by whom and why (read from the requests decided since this
        -- transaction began, so no caller can write this detail itself; a decision's
        -- decided_at is the clock's, at or after its transaction's now()).
        WHEN TG_OP = 'UPDATE' AND OLD.state = 'awaiting_approval' AND NEW.state = 'active'
            THEN (SELECT pg_catalog.jsonb_build_object('refused', pg_catalog.jsonb_agg(
                             pg_catalog.jsonb_build_object(
                                 'approval_id', a.approval_id, 'effect_id', a.effect_id,
                                 'decision', a.state, 'decided_by', a.decided_by,
                                 'reason', a.reason)
                             ORDER BY a.approval_id))
                  FROM undolog.undolog_approval_requests AS a
                  WHERE a.session_id = NEW.session_id AND a.state IN ('rejected', 'expired')
                    AND a.decided_at >= now()
                  HAVING pg_catalog.count(*) > 0)
        END
    );
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.sessions_guard() FROM public;
