-- undolog.effect_log_guard: BEFORE INSERT OR UPDATE on undolog_effect_log (cloned onto
-- every partition). Identity columns never change; a state change must be one of
-- undolog.effect_transition_allowed; every state change and every replay is appended to
-- undolog_effect_history. Because it is a trigger, no code path can skip the history.
-- A new call is one history row (its creation in its starting state), not two.
CREATE OR REPLACE FUNCTION undolog.effect_log_guard()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A new effect starts pending; intercept may insert it already executing, which
        -- is the pending -> executing transition and is recorded as such.
        -- The tier and the starting state are checked here, not by CHECK constraints.
        IF NOT coalesce(NEW.tier IN ('compensable', 'irreversible')
                        AND (NEW.state = 'pending'
                             OR (NEW.state = 'executing' AND NEW.tier = 'compensable')),
                        false) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL001',
                MESSAGE = pg_catalog.format('a %s effect cannot start %s', NEW.tier, NEW.state);
        END IF;
        -- One history row per insert, whatever the starting state: NULL -> pending, or
        -- NULL -> executing for a COMPENSABLE call that intercept executes at once (the
        -- pending -> executing step of the state machine, taken in the same statement).
        INSERT INTO undolog.undolog_effect_history
            (session_id, effect_id, executed_at, event, from_state, to_state)
        VALUES (NEW.session_id, NEW.effect_id, NEW.executed_at, 'transition', NULL, NEW.state);
        RETURN NEW;
    END IF;

    -- intercepted_by (who made the call) is identity too: approvals are refused by it;
    -- so is tool_id, the registration the undo walk takes the compensation from.
    IF (NEW.effect_id, NEW.session_id, NEW.executed_at, NEW.call_signature, NEW.step_index,
        NEW.tool_name, NEW.tier, NEW.args, NEW.intercepted_by, NEW.tool_id)
       IS DISTINCT FROM
       (OLD.effect_id, OLD.session_id, OLD.executed_at, OLD.call_signature, OLD.step_index,
        OLD.tool_name, OLD.tier, OLD.args, OLD.intercepted_by, OLD.tool_id) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL011',
            MESSAGE = 'an effect''s identity (id, session, time, signature, step, tool, tier, args, maker, registration) cannot change',
            DETAIL = pg_catalog.format('effect %s', OLD.effect_id);
    END IF;
    NEW.updated_at := now();

    IF NEW.state <> OLD.state THEN
        IF NOT undolog.effect_transition_allowed(NEW.tier, OLD.state, NEW.state) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL001',
                MESSAGE = pg_catalog.format('invalid %s effect transition %s -> %s',
                                            NEW.tier, OLD.state, NEW.state),
                DETAIL = pg_catalog.format('effect %s', NEW.effect_id);
        END IF;
        INSERT INTO undolog.undolog_effect_history
            (session_id, effect_id, executed_at, event, from_state, to_state, detail)
        VALUES (
            NEW.session_id, NEW.effect_id, NEW.executed_at, 'transition', OLD.state, NEW.state,
            CASE WHEN NEW.error IS DISTINCT FROM OLD.error AND NEW.error IS NOT NULL
                THEN pg_catalog.jsonb_build_object('error', NEW.error) END
        );
    ELSIF NEW.replay_count > OLD.replay_count THEN
        INSERT INTO undolog.undolog_effect_history
            (session_id, effect_id, executed_at, event, from_state, to_state, detail)
        VALUES (
            NEW.session_id, NEW.effect_id, NEW.executed_at, 'replayed', OLD.state, NEW.state,
            pg_catalog.jsonb_build_object('replay_count', NEW.replay_count)
        );
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.effect_log_guard() FROM public;
