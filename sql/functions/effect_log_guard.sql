-- undolog.effect_log_guard: BEFORE UPDATE on undolog_effect_log, and BEFORE INSERT but for
-- a new COMPENSABLE call (the triggers' WHEN; cloned onto every partition). Identity
-- columns never change; a new effect starts as intercept writes it; a state change must
-- be one of undolog.effect_transition_allowed; every state change and every replay is
-- recorded, linked into the session's hash chain. Because it is a trigger, no code path
-- that changes an effect can skip the record.
-- A call's two hot events are recorded in its own row (migration 0013): its creation
-- (executed_at, intercepted_by; linked in chain_*) and its commit (committed_at,
-- committed_by, the result; linked in commit_*). A COMPENSABLE call is linked at its
-- first change of state (its insert fires no trigger): when that is the commit, the one
-- link commit_* records both, since the commit's record is the whole call. An
-- IRREVERSIBLE call is linked when inserted. Every other transition (fail, retry,
-- approval, the walk) and every replay appends a row to undolog_effect_history, which
-- links itself (undolog.chain_effect_history), after the creation's link when both are
-- written by one change.
CREATE OR REPLACE FUNCTION undolog.effect_log_guard()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_canonical text;
    v_seq bigint;
    v_prev bytea;
    v_hash bytea;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A new effect starts as intercept writes it: a COMPENSABLE call executing (the
        -- pending -> executing step taken in the same statement), an IRREVERSIBLE one
        -- pending its approval. The creation record's state follows from the tier.
        IF NOT coalesce((NEW.tier = 'compensable' AND NEW.state = 'executing')
                        OR (NEW.tier = 'irreversible' AND NEW.state = 'pending'), false) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL001',
                MESSAGE = pg_catalog.format('a %s effect cannot start %s', NEW.tier, NEW.state),
                HINT = 'The journal changes only through undolog''s functions, and none of them '
                       'asks for this: if one did, report it as a bug with the statement. Nothing '
                       'was changed.';
        END IF;
        -- Nothing is recorded or linked by an insert but what the guard writes below.
        NEW.events_in_row := true;
        NEW.committed_at := NULL;
        NEW.committed_by := NULL;
        NEW.commit_seq := NULL;
        NEW.commit_prev := NULL;
        NEW.commit_hash := NULL;
        NEW.chain_seq := NULL;
        NEW.chain_prev := NULL;
        NEW.chain_hash := NULL;
        NEW.replay_count := 0;
        NEW.last_replayed_at := NULL;
        IF NEW.tier = 'compensable' THEN
            RETURN NEW;  -- linked at its first change of state
        END IF;
        v_canonical := undolog.chain_record_effect(
            'created', NEW.session_id, NEW.effect_id, NEW.executed_at, NEW.call_signature,
            NEW.step_index, NEW.tool_name, NEW.tier, NEW.args, NEW.intercepted_by,
            NEW.tool_id, NULL, NULL, NULL);
    ELSE
        -- intercepted_by (who made the call) is identity too: approvals are refused by
        -- it; so is tool_id, the registration the undo walk takes the compensation from;
        -- and so is every linked record: the creation's link, and the commit with its
        -- result once made.
        IF (NEW.effect_id, NEW.session_id, NEW.executed_at, NEW.call_signature,
            NEW.step_index, NEW.tool_name, NEW.tier, NEW.args, NEW.intercepted_by,
            NEW.tool_id, NEW.events_in_row, NEW.chain_seq, NEW.chain_prev, NEW.chain_hash,
            NEW.committed_at, NEW.committed_by, NEW.commit_seq, NEW.commit_prev,
            NEW.commit_hash)
           IS DISTINCT FROM
           (OLD.effect_id, OLD.session_id, OLD.executed_at, OLD.call_signature,
            OLD.step_index, OLD.tool_name, OLD.tier, OLD.args, OLD.intercepted_by,
            OLD.tool_id, OLD.events_in_row, OLD.chain_seq, OLD.chain_prev, OLD.chain_hash,
            OLD.committed_at, OLD.committed_by, OLD.commit_seq, OLD.commit_prev,
            OLD.commit_hash)
           OR (OLD.committed_at IS NOT NULL
               AND NEW.result_snapshot IS DISTINCT FROM OLD.result_snapshot) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL011',
                MESSAGE = 'an effect''s identity (id, session, time, signature, step, tool, tier, args, maker, registration) and its recorded commit cannot change',
                DETAIL = pg_catalog.format('effect %s', OLD.effect_id),
                HINT = 'The journal changes only through undolog''s functions, and none of them '
                       'asks for this: if one did, report it as a bug with the statement. Nothing '
                       'was changed.';
        END IF;
        NEW.updated_at := now();

        IF NEW.state = OLD.state THEN
            IF NEW.replay_count > OLD.replay_count THEN
                INSERT INTO undolog.undolog_effect_history
                    (session_id, effect_id, executed_at, event, from_state, to_state, detail)
                VALUES (
                    NEW.session_id, NEW.effect_id, NEW.executed_at, 'replayed', OLD.state,
                    NEW.state, pg_catalog.jsonb_build_object('replay_count', NEW.replay_count)
                );
            END IF;
            RETURN NEW;
        END IF;
        IF NOT undolog.effect_transition_allowed(NEW.tier, OLD.state, NEW.state) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL001',
                MESSAGE = pg_catalog.format('invalid %s effect transition %s -> %s',
                                            NEW.tier, OLD.state, NEW.state),
                DETAIL = pg_catalog.format('effect %s', NEW.effect_id),
                HINT = 'The journal changes only through undolog''s functions, and none of them '
                       'asks for this: if one did, report it as a bug with the statement. Nothing '
                       'was changed.';
        END IF;
        IF NEW.state = 'committed' THEN
            -- executing -> committed, the only way in: the commit, recorded here; its
            -- record is the whole call, so that its one link stands for the creation
            -- too when the creation has none yet.
            NEW.committed_at := pg_catalog.clock_timestamp();
            NEW.committed_by := session_user;
            v_canonical := undolog.chain_record_effect(
                'committed', NEW.session_id, NEW.effect_id, NEW.executed_at,
                NEW.call_signature, NEW.step_index, NEW.tool_name, NEW.tier, NEW.args,
                NEW.intercepted_by, NEW.tool_id, NEW.committed_at, NEW.committed_by,
                NEW.result_snapshot);
        ELSIF NEW.events_in_row AND OLD.chain_seq IS NULL AND OLD.committed_at IS NULL THEN
            -- A COMPENSABLE call's first change is not its commit (it failed, or the
            -- walk took it while executing): its creation is linked now, then the
            -- change's history row. A committed call's link stands for its creation.
            v_canonical := undolog.chain_record_effect(
                'created', NEW.session_id, NEW.effect_id, NEW.executed_at,
                NEW.call_signature, NEW.step_index, NEW.tool_name, NEW.tier, NEW.args,
                NEW.intercepted_by, NEW.tool_id, NULL, NULL, NULL);
        END IF;
    END IF;

    -- The row's link, when it records an event: the session's head moves on (its row
    -- lock orders the session's writers), inline as in undolog.chain_effect_history;
    -- chain_link makes the head.
    IF v_canonical IS NOT NULL THEN
        UPDATE undolog.undolog_chain_heads AS h
        SET seq = h.seq + 1, prev = h.head, head = undolog.chain_hash(h.head, v_canonical)
        WHERE h.session_id = NEW.session_id
        RETURNING h.seq, h.prev, h.head INTO v_seq, v_prev, v_hash;
        IF NOT FOUND THEN
            SELECT l.seq, l.prev, l.hash INTO v_seq, v_prev, v_hash
            FROM undolog.chain_link(NEW.session_id, v_canonical) AS l;
        END IF;
        IF NEW.state = 'committed' THEN
            NEW.commit_seq := v_seq;
            NEW.commit_prev := v_prev;
            NEW.commit_hash := v_hash;
            RETURN NEW;
        END IF;
        NEW.chain_seq := v_seq;
        NEW.chain_prev := v_prev;
        NEW.chain_hash := v_hash;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        -- Any other transition: its history row, linked after the creation's.
        INSERT INTO undolog.undolog_effect_history
            (session_id, effect_id, executed_at, event, from_state, to_state, detail)
        VALUES (
            NEW.session_id, NEW.effect_id, NEW.executed_at, 'transition', OLD.state,
            NEW.state,
            CASE WHEN NEW.error IS DISTINCT FROM OLD.error AND NEW.error IS NOT NULL
                THEN pg_catalog.jsonb_build_object('error', NEW.error) END
        );
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.effect_log_guard() FROM public;
