-- undolog.undo_stack_guard: BEFORE UPDATE on undolog_undo_stack. An entry's identity
-- (which effect, its call's signature, which compensation, where on the stack) never
-- changes: the signature is the call's exactly-once key. Its state follows
-- undolog.undo_transition_allowed; its attempt count never goes down; and every state
-- change or re-claim is appended to undolog_undo_history, whoever makes it.
-- Inserts are not guarded: intercept pushes entries on its hot path, always pending.
CREATE OR REPLACE FUNCTION undolog.undo_stack_guard()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF (NEW.undo_id, NEW.session_id, NEW.stack_position, NEW.effect_id, NEW.executed_at,
        NEW.call_signature, NEW.compensation, NEW.max_attempts, NEW.created_at)
       IS DISTINCT FROM
       (OLD.undo_id, OLD.session_id, OLD.stack_position, OLD.effect_id, OLD.executed_at,
        OLD.call_signature, OLD.compensation, OLD.max_attempts, OLD.created_at) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL011',
            MESSAGE = 'an undo entry''s identity (id, session, position, effect, signature, '
                      'compensation, max_attempts) cannot change',
            DETAIL = pg_catalog.format('undo entry %s', OLD.undo_id),
            HINT = 'The journal changes only through undolog''s functions, and none of them asks '
                   'for this: if one did, report it as a bug with the statement. Nothing was '
                   'changed.';
    END IF;
    IF NEW.attempts < OLD.attempts THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL011',
            MESSAGE = 'an undo entry''s attempt count never goes down',
            DETAIL = pg_catalog.format('undo entry %s', OLD.undo_id),
            HINT = 'The journal changes only through undolog''s functions, and none of them asks '
                   'for this: if one did, report it as a bug with the statement. Nothing was '
                   'changed.';
    END IF;
    IF NEW.state <> OLD.state AND NOT undolog.undo_transition_allowed(OLD.state, NEW.state) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('invalid undo entry transition %s -> %s',
                                        OLD.state, NEW.state),
            DETAIL = pg_catalog.format('undo entry %s', NEW.undo_id),
            HINT = 'The journal changes only through undolog''s functions, and none of them asks '
                   'for this: if one did, report it as a bug with the statement. Nothing was '
                   'changed.';
    END IF;
    NEW.updated_at := now();

    IF NEW.state <> OLD.state OR NEW.attempts <> OLD.attempts THEN
        INSERT INTO undolog.undolog_undo_history
            (session_id, undo_id, event, from_state, to_state, attempt, detail)
        VALUES (
            NEW.session_id, NEW.undo_id,
            -- Same state, one more attempt: an expired claim handed out again.
            CASE WHEN NEW.state = OLD.state THEN 'reclaimed' ELSE 'transition' END,
            OLD.state, NEW.state, NEW.attempts,
            nullif(pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
                'error', CASE WHEN OLD.state = 'compensating'
                                   AND NEW.state IN ('pending', 'compensation_failed')
                              THEN NEW.last_error END,
                'claimed_by', CASE WHEN NEW.state = 'compensating' THEN NEW.claimed_by END,
                'claimed_until', CASE WHEN NEW.state = 'compensating' THEN NEW.claimed_until END,
                'next_attempt_at', CASE WHEN NEW.state = 'pending' THEN NEW.next_attempt_at END
            )), '{}'::jsonb)
        );
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.undo_stack_guard() FROM public;
