-- undolog.claim_compensation: hand the next compensation of a session's undo walk to a
-- walker, strictly LIFO. Answers one row (undo_id, effect_id, tool_name, compensation,
-- args, result_snapshot, attempt) or none. The walker runs compensation ->> 'name' with
-- compensation -> 'args', the original call's args and result_snapshot (NULL when the
-- call's outcome is unknown), passing undo_id as the idempotency key, then calls
-- complete_compensation or fail_compensation.
-- result_snapshot is the effect's; when it has none (the walk took the call while it was
-- executing) and a result of the call arrived late since (a late_commit event in the
-- effect's history: finish_execution), it is that result (the first, if several), so a
-- compensation built from the result can run. The effect keeps no commit (its row is not
-- changed), the late commit still flags the session for an operator, and a claim already
-- handed out is not changed: the result reaches the entry's next attempt. A late error
-- report (late_fail) carries no result: NULL, as before. A claim that hands a late result
-- says so in a NOTICE naming the late_commit event (the row's columns stay as they were,
-- for the clients that read them).
--
-- The top unfinished entry (pending or in flight, highest stack_position) is the only
-- candidate. No row when it is not available: in flight under a live claim, locked by
-- another transaction (the entry, or its effect while a result of its call is recorded),
-- or waiting for its retry time. A lower entry is never handed out
-- instead: that would undo an older call before a newer one.
-- On the way down, entries with nothing to undo are skipped (entry -> skipped):
--   - a COMPENSABLE call that failed and was reported (effect pending): it never acted;
--   - a barrier (IRREVERSIBLE call) that never acted: effect pending, approved, rejected.
-- A barrier whose call may have acted (committed, or executing: outcome unknown) stops
-- the walk: the session halts for a human, and it and every entry below stay pending.
-- When no unfinished entry is left, the session becomes compensated (no row): the walk
-- ends with the claim that finds nothing left, never in complete_compensation.
--
-- Claiming moves the session failed -> compensating (first claim), the effect committed
-- or executing -> compensating, the entry -> compensating (in flight) until
-- now() + claim timeout: p_claim_timeout, else the GUC undolog.claim_timeout, else
-- 5 minutes. An entry whose claim expired (its walker died) is handed out again as a new
-- attempt; if that claim had been its last allowed attempt, the entry is given up instead
-- (compensation_failed, session halted), so a compensation that kills its walker every
-- time cannot loop forever.
--
-- The compensation answered is the one the effect's tool registration names; an entry
-- whose descriptor disagrees with it halts the session instead (see below).
--
-- A partial walk (rollback_to: the session's undo_floor is set) hands out only entries
-- at or above its floor; the claim that finds none left there sends the session back to
-- active instead of compensated (no row).
--
-- UL002 unknown session; UL010 when the session has no walk to run (active, completed,
-- awaiting_approval) or its walk is stopped (halted: an operator must act). A compensated
-- session answers no row, so a late walker simply finds the walk over.
CREATE OR REPLACE FUNCTION undolog.claim_compensation(
    p_session_id uuid, p_claim_timeout interval DEFAULT NULL
)
RETURNS TABLE (
    undo_id uuid,
    effect_id uuid,
    tool_name text,
    compensation jsonb,
    args jsonb,
    result_snapshot jsonb,
    attempt integer
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_timeout interval;
    v_max_default integer;
    v_session undolog.undolog_sessions;
    v_state text;
    v_top_id uuid;
    v_entry undolog.undolog_undo_stack;
    v_effect undolog.undolog_effect_log;
    v_attempt integer;
    v_registered jsonb;
    v_result jsonb;
    v_late_id bigint;
BEGIN
    -- Every setting is read before anything is written: a bad one writes nothing.
    v_timeout := coalesce(p_claim_timeout,
                          undolog.setting_interval('undolog.claim_timeout', interval '5 minutes'));
    IF v_timeout <= interval '0' OR v_timeout > interval '1 day' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('claim timeout must be a positive interval up to 1 day, not %s',
                                        v_timeout),
            HINT = 'Set undolog.claim_timeout (or pass one) as an interval from ''1 second'' to '
                   '''1 day'', e.g. ''5 minutes''.';
    END IF;
    v_max_default := undolog.setting_integer('undolog.default_max_attempts', 5, 1, 100);

    -- The session row serialises the claims of one session and the session transitions
    -- they make; walkers of different sessions never wait for each other.
    v_session := undolog.lock_session(p_session_id);
    v_state := v_session.state;
    IF v_state = 'compensated' THEN
        RETURN;
    END IF;
    IF v_state NOT IN ('failed', 'compensating') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL010',
            MESSAGE = pg_catalog.format('session %s is %s: %s', p_session_id, v_state,
                CASE v_state
                    WHEN 'halted' THEN 'its undo walk is stopped until an operator acts'
                    ELSE 'there is no undo walk to run (only a failed session is undone)'
                END),
            HINT = CASE v_state
                WHEN 'halted' THEN pg_catalog.format(
                    'Retry, resume or abandon its walk: undolog sessions retry|resume|abandon '
                    '%s --by WHO (undolog sessions show %s says where it stopped).',
                    p_session_id, p_session_id)
                ELSE pg_catalog.format(
                    'Only a failed session is walked: undolog sessions rollback %s --by WHO '
                    '--reason TEXT fails a live one.', p_session_id)
            END;
    END IF;
    IF v_state = 'failed' THEN
        PERFORM undolog.transition_session(p_session_id, 'compensating');
    END IF;

    LOOP
        -- The top unfinished entry, found first and then locked on its own, so that a
        -- locked top entry means "no row", never "the next one down".
        SELECT u.undo_id INTO v_top_id
        FROM undolog.undolog_undo_stack AS u
        WHERE u.session_id = p_session_id AND u.state IN ('pending', 'compensating')
          AND u.stack_position >= coalesce(v_session.undo_floor, 0)
        ORDER BY u.stack_position DESC
        LIMIT 1;
        IF NOT FOUND AND v_session.undo_floor IS NOT NULL THEN
            -- A partial walk (rollback_to) reached its floor: the session goes on, with
            -- a fresh lease (its agent may not have renewed it while the walk ran).
            UPDATE undolog.undolog_sessions AS s
            SET state = 'active', undo_floor = NULL,
                lease_expires_at = undolog.utc_after(now(), s.lease_duration)
            WHERE s.session_id = p_session_id;
            RETURN;
        END IF;
        IF NOT FOUND THEN
            PERFORM undolog.transition_session(p_session_id, 'compensated');
            RETURN;
        END IF;

        SELECT u.* INTO v_entry
        FROM undolog.undolog_undo_stack AS u
        WHERE u.session_id = p_session_id AND u.undo_id = v_top_id
          AND u.state IN ('pending', 'compensating')
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;  -- another transaction holds the top entry
        END IF;
        IF v_entry.state = 'compensating' AND v_entry.claimed_until > now() THEN
            RETURN;  -- in flight under a live claim
        END IF;
        IF v_entry.state = 'pending' AND v_entry.next_attempt_at > now() THEN
            RETURN;  -- waiting for its retry
        END IF;

        -- Its effect, not waited for either: a result of its call being recorded
        -- (commit, fail, a late one: finish_execution) holds it, then links the result
        -- into the session's chain, whose head this claim may hold already (the move to
        -- compensating above, an entry skipped below): waiting here, each waited for the
        -- other (40P01). No row then, as for a locked entry; the next claim takes it.
        SELECT e.* INTO v_effect
        FROM undolog.undolog_effect_log AS e
        WHERE e.session_id = v_entry.session_id AND e.effect_id = v_entry.effect_id
          AND e.executed_at = v_entry.executed_at
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF EXISTS (SELECT FROM undolog.undolog_effect_log AS e
                       WHERE e.session_id = v_entry.session_id
                         AND e.effect_id = v_entry.effect_id
                         AND e.executed_at = v_entry.executed_at) THEN
                RETURN;  -- another transaction holds the effect
            END IF;
            -- Unreachable through the API (an entry and its effect are written together
            -- and dropped together): stop for a human rather than guess.
            PERFORM undolog.halt_walk(
                p_session_id, v_entry.undo_id,
                pg_catalog.format('undo entry %s has no effect %s', v_entry.undo_id,
                                  v_entry.effect_id)
            );
            RETURN;
        END IF;

        IF v_entry.compensation IS NULL THEN
            -- A barrier. Anything but "it certainly never ran" halts: a human must judge
            -- what an irreversible call that may have acted did.
            IF v_effect.state IN ('pending', 'approved', 'rejected') THEN
                UPDATE undolog.undolog_undo_stack AS u
                SET state = 'skipped'
                WHERE u.session_id = v_entry.session_id AND u.undo_id = v_entry.undo_id;
                CONTINUE;
            END IF;
            PERFORM undolog.halt_walk(
                p_session_id, v_entry.undo_id,
                pg_catalog.format('the undo walk reached irreversible call %s (effect %s, %s), '
                                  'which nothing can undo', v_effect.tool_name,
                                  v_effect.effect_id, v_effect.state)
            );
            RETURN;
        END IF;

        IF v_effect.state = 'pending' THEN
            UPDATE undolog.undolog_undo_stack AS u
            SET state = 'skipped'
            WHERE u.session_id = v_entry.session_id AND u.undo_id = v_entry.undo_id;
            CONTINUE;
        END IF;
        IF v_effect.state NOT IN ('committed', 'executing', 'compensating') THEN
            -- Unreachable through the API (an unfinished entry of a compensated effect):
            -- stop for a human rather than guess.
            PERFORM undolog.halt_walk(
                p_session_id, v_entry.undo_id,
                pg_catalog.format('undo entry %s is %s but its effect %s is %s',
                                  v_entry.undo_id, v_entry.state, v_effect.effect_id,
                                  v_effect.state)
            );
            RETURN;
        END IF;
        IF v_entry.state = 'compensating'
           AND v_entry.attempts >= coalesce(v_entry.max_attempts, v_max_default) THEN
            PERFORM undolog.give_up_compensation(
                v_entry,
                pg_catalog.format('the claim of attempt %s expired at %s without an outcome',
                                  v_entry.attempts, undolog.chain_time(v_entry.claimed_until))
            );
            RETURN;
        END IF;

        -- What the walker runs is the registration's compensation (the effect's tool_id),
        -- never the journal's descriptor alone: a descriptor that disagrees with it (only
        -- a write around the API can make one) stops the walk for a person, with the
        -- reason. Effects journaled before the registry existed have no tool_id: their
        -- descriptor is all there is, and it is used as before.
        IF v_effect.tool_id IS NOT NULL THEN
            SELECT t.compensation - 'max_attempts' INTO v_registered
            FROM undolog.undolog_tools AS t
            WHERE t.tool_id = v_effect.tool_id;
            IF v_registered IS DISTINCT FROM v_entry.compensation THEN
                PERFORM undolog.halt_walk(
                    p_session_id, v_entry.undo_id,
                    pg_catalog.format('undo entry %s names compensation %s, but tool %s '
                                      '(registration %s) is registered with %s: not run',
                                      v_entry.undo_id, v_entry.compensation, v_effect.tool_name,
                                      v_effect.tool_id, coalesce(v_registered::text, 'none'))
                );
                RETURN;
            END IF;
        END IF;

        UPDATE undolog.undolog_undo_stack AS u
        SET state = 'compensating',
            attempts = u.attempts + 1,
            claimed_by = pg_catalog.format('%s (pid %s)', session_user, pg_catalog.pg_backend_pid()),
            claimed_at = now(),
            claimed_until = undolog.utc_after(now(), v_timeout)
        WHERE u.session_id = v_entry.session_id AND u.undo_id = v_entry.undo_id
        RETURNING u.attempts INTO v_attempt;
        IF v_effect.state <> 'compensating' THEN
            UPDATE undolog.undolog_effect_log AS e
            SET state = 'compensating'
            WHERE e.session_id = v_effect.session_id AND e.effect_id = v_effect.effect_id
              AND e.executed_at = v_effect.executed_at;
        END IF;
        -- The call's result: the effect's, or, when it has none (the walk took the call
        -- while it was executing), the first result that arrived late for it (its
        -- late_commit event, recorded by finish_execution before this claim: it holds the
        -- effect). The effect row is not changed: its recorded commit is the one it has.
        -- The walker is told so in a NOTICE (which names the event), for its log.
        v_result := v_effect.result_snapshot;
        IF v_result IS NULL THEN
            SELECT h.history_id, coalesce(h.detail -> 'result', 'null'::jsonb)
            INTO v_late_id, v_result
            FROM undolog.undolog_effect_history AS h
            WHERE h.session_id = v_effect.session_id AND h.executed_at = v_effect.executed_at
              AND h.effect_id = v_effect.effect_id AND h.event = 'late_commit'
            ORDER BY h.history_id
            LIMIT 1;
            IF v_late_id IS NOT NULL THEN
                RAISE NOTICE USING
                    MESSAGE = pg_catalog.format(
                        'undo entry %s (attempt %s) is handed the result that arrived late for '
                        'effect %s (late_commit, effect history %s): the effect has none',
                        v_entry.undo_id, v_attempt, v_effect.effect_id, v_late_id),
                    HINT = 'The session is flagged for an operator (sessions_overview); '
                           'undolog sessions show ID lists what arrived and when.';
            END IF;
        END IF;
        RETURN QUERY SELECT v_entry.undo_id, v_effect.effect_id, v_effect.tool_name,
                            coalesce(v_registered, v_entry.compensation), v_effect.args,
                            v_result,
                            v_attempt;
        RETURN;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.claim_compensation(uuid, interval) FROM public;
