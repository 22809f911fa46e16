-- undolog.journal_call: the journaling of one call, shared by its two entry points:
-- intercept (the tool named, its tier and compensation checked against its
-- registration: p_tool_id NULL) and intercept_tool (the registration named by p_tool_id;
-- p_tool_name, p_tier and p_compensation are NULL and taken from it). What intercept
-- answers and refuses is documented there. Called by those two only and granted to
-- nobody; it trusts nothing they pass on: it checks the call, and resolves the id itself.
CREATE OR REPLACE FUNCTION undolog.journal_call(
    p_session_id uuid,
    p_tool_id uuid,
    p_step_index integer,
    p_tool_name text,
    p_tier text,
    p_args jsonb,
    p_call_signature text,
    p_compensation jsonb
)
RETURNS TABLE (
    effect_id uuid, action text, state text, result_snapshot jsonb, approval_id uuid
)
LANGUAGE plpgsql
-- A custom plan of a statement on the partitioned effect log prunes partitions at plan
-- time, so it always looks cheaper and is re-planned on every call (~60 us); a generic
-- plan prunes at run time instead. Measured in bench/bench_intercept.py.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_session_state text;
    v_owner_role text;
    v_effect_id uuid;
    v_executed_at timestamptz;
    v_effect undolog.undolog_effect_log;
    v_approval_id uuid;
    v_approval_state text;
    -- The registration, as scalars: a %ROWTYPE of the registry would tie this function's
    -- validation to a table a migration creates after the repeatables are defined.
    v_tool_id uuid;
    v_tool_tier text;
    v_tool_compensation jsonb;
    v_client_sync text := pg_catalog.current_setting('synchronous_commit');
    -- Whether this transaction wrote anything before this call (an intent among it).
    v_wrote_before boolean := pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL;
    -- Whether this transaction holds the call's key (signature_lock_key): false, another
    -- one is journaling this very call.
    v_call_free boolean;
BEGIN
    IF v_client_sync = 'off' THEN
        -- In the body, not a SET clause: a SET clause is undone when the function
        -- returns, before the transaction commits. 'local' and stronger settings stay.
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    IF p_tool_id IS NULL THEN
        PERFORM undolog.check_call(p_session_id, p_step_index, p_tool_name, p_tier, p_args,
                                   p_call_signature, p_compensation);
    ELSE
        -- The registration passed check_tool when it was made: only the call's own part
        -- is checked, and the registration is found by its primary key. It must be the
        -- caller's, who must be the session's owner (check_session_caller below), and
        -- live: a retired one admits no call, a replay included.
        IF NOT undolog.call_args_ok(p_session_id, p_step_index, p_args, p_call_signature) THEN
            PERFORM undolog.check_call_args(p_session_id, p_step_index, p_args,
                                            p_call_signature);
        END IF;
        SELECT t.tool_name, t.tier, t.compensation
        INTO p_tool_name, p_tier, v_tool_compensation
        FROM undolog.undolog_tools AS t
        WHERE t.tool_id = p_tool_id AND t.owner_role = session_user AND t.retired_at IS NULL;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL017',
                MESSAGE = pg_catalog.format('tool %s is not registered for %s', p_tool_id,
                                            session_user),
                DETAIL = 'No live registration of this login has that tool_id: it was '
                         'retired, or it is another login''s, or there is none.',
                HINT = 'Register the tool again with undolog.register_tool (the binding does '
                       'so once, then retries), and call with the tool_id it answers.';
        END IF;
        v_tool_id := p_tool_id;
    END IF;

    -- The session's advisory lock, shared: whatever moves the session (fail_session,
    -- recover: lock_session) waits until this call's undo entry is visible, and no row is
    -- written to say so (session_lock_key). An IRREVERSIBLE call may move the session (to
    -- awaiting_approval): it takes the row FOR UPDATE, then the lock exclusive, in
    -- lock_session's order. Under REPEATABLE READ or SERIALIZABLE, this transaction's
    -- snapshot may predate a fail_session that committed while it waited: FOR SHARE then
    -- raises the serialization failure that reading without a row lock would miss.
    -- The lock is keyed by the caller's login, which must be the owner (checked next):
    -- a login naming another's session locks a key of its own (session_lock_key). It is
    -- tried first, and taken at once unless a transaction that moves the session on (a
    -- decision, a walk, one of its IRREVERSIBLE calls) holds it; only then is it waited
    -- for, as long as lock_session waits at most (lock_session_shared, then UL030).
    -- A new IRREVERSIBLE call asks, and counts its login's pending requests under the
    -- login's lock (check_pending_approvals): it takes that lock first, before its
    -- session's, so that no transaction holds a session while it waits for the login's
    -- lock. Taken after, it closed a cycle between two transactions asking in two sessions
    -- of one login, each then in the other's (40P01). A call already journaled (a replay,
    -- an approved call made again) does not ask and does not take it: this probe of its
    -- key finds it (an entry, once written, stays; a probe that misses takes the lock for
    -- nothing, and the one after the session's locks decides). Keyed by the caller's
    -- login, who is the owner: checked first (check_own_session, as lock_own_session
    -- checks); the wait is bounded (lock_pending_approvals).
    -- A compensable call takes none of this.
    -- Another transaction journaling this very call holds the call's key (its session's
    -- and signature's: signature_lock_key): don't queue behind it, answer in_progress.
    -- Tried once the caller is known to be the session's owner, so that only the owner's
    -- login ever holds it: a login naming this session is refused before, and one sending
    -- this signature in a session of its own tries a key of that session. An IRREVERSIBLE
    -- call tries it before the session's locks (a concurrent one answers at once, rather
    -- than wait for them), a COMPENSABLE call after the shared one. A try never waits: it
    -- is in no lock order.
    IF p_tier = 'irreversible' THEN
        v_owner_role := undolog.check_own_session(p_session_id);
        v_call_free := pg_catalog.pg_try_advisory_xact_lock(
            undolog.signature_lock_key(p_session_id, p_call_signature));
        IF v_call_free THEN
            PERFORM FROM undolog.undolog_undo_stack AS u
            WHERE u.session_id = p_session_id AND u.call_signature = p_call_signature;
            IF NOT FOUND THEN
                PERFORM undolog.lock_pending_approvals(session_user);
            END IF;
            -- lock_session, not lock_own_session: the caller was checked above (a session
            -- found is never deleted, and its owner never changes).
            SELECT s.state INTO v_session_state
            FROM undolog.lock_session(p_session_id) AS s;
        END IF;
    ELSE
        IF NOT pg_catalog.pg_try_advisory_xact_lock_shared(
                undolog.session_lock_key(p_session_id, session_user)) THEN
            PERFORM undolog.lock_session_shared(p_session_id);
        END IF;
        IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
            SELECT s.state, s.owner_role INTO v_session_state, v_owner_role
            FROM undolog.undolog_sessions AS s
            WHERE s.session_id = p_session_id;
        ELSE
            SELECT s.state, s.owner_role INTO v_session_state, v_owner_role
            FROM undolog.undolog_sessions AS s
            WHERE s.session_id = p_session_id
            FOR SHARE;
        END IF;
        IF NOT FOUND THEN
            PERFORM undolog.unknown_session(p_session_id);
        END IF;
        IF v_owner_role IS DISTINCT FROM session_user THEN  -- it names the refusal
            PERFORM undolog.check_session_caller(p_session_id, v_owner_role);
        END IF;
        v_call_free := pg_catalog.pg_try_advisory_xact_lock(
            undolog.signature_lock_key(p_session_id, p_call_signature));
    END IF;
    IF NOT v_call_free THEN
        RETURN QUERY SELECT NULL::uuid, 'in_progress'::text, NULL::text, NULL::jsonb,
                            NULL::uuid;
        RETURN;
    END IF;

    -- A call made again (a replay: an agent run again after a crash) is found by its key
    -- first: trying the insert would evaluate every default of a new entry (two ids, a
    -- stack position) before finding the key taken. A new call pays one probe of the
    -- undo stack's signature index for this; a replay gets its effect's primary key.
    SELECT u.effect_id, u.executed_at INTO v_effect_id, v_executed_at
    FROM undolog.undolog_undo_stack AS u
    WHERE u.session_id = p_session_id AND u.call_signature = p_call_signature;
    IF NOT FOUND THEN
        -- By name (intercept): the live registration of the tool, found by one lookup of its
        -- index, before the undo entry that carries its compensation; the call must agree
        -- with it, which only a new call is held to below (a replay answers what it did).
        -- By id (intercept_tool), it was found above. The session's owner is the caller
        -- (check_session_caller above).
        IF p_tool_id IS NULL THEN
            SELECT t.tool_id, t.tier, t.compensation
            INTO v_tool_id, v_tool_tier, v_tool_compensation
            FROM undolog.undolog_tools AS t
            WHERE t.owner_role = v_owner_role AND t.tool_name = p_tool_name
              AND t.retired_at IS NULL;
        END IF;

        -- The exactly-once insert: the call's undo entry (its compensation, or an
        -- IRREVERSIBLE call's barrier) holds the call's key, unique per session and signature.
        INSERT INTO undolog.undolog_undo_stack
            (session_id, effect_id, executed_at, call_signature, compensation, max_attempts)
        VALUES
            (p_session_id, undolog.effect_id_at(now()), now(), p_call_signature,
             CASE WHEN p_tier = 'compensable' THEN v_tool_compensation - 'max_attempts' END,
             CASE WHEN p_tier = 'compensable'
                  THEN (v_tool_compensation ->> 'max_attempts')::integer END)
        ON CONFLICT (session_id, call_signature) DO NOTHING
        RETURNING undolog_undo_stack.effect_id, undolog_undo_stack.executed_at
        INTO v_effect_id, v_executed_at;

        IF FOUND THEN
            -- A new call. While a person is being asked (awaiting_approval), nothing acts:
            -- a new COMPENSABLE call is refused, but a new IRREVERSIBLE one only asks too,
            -- with its own request, so that one model turn's irreversible calls are all asked
            -- at once. It holds the session's row lock (lock_session above), as a decision does.
            -- A refusal here rolls the undo entry back with the transaction.
            IF v_session_state <> 'active'
               AND NOT (p_tier = 'irreversible' AND v_session_state = 'awaiting_approval') THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'UL010',
                    MESSAGE = pg_catalog.format('session %s is %s: new calls are refused',
                                                p_session_id, v_session_state),
                    HINT = CASE v_session_state
                        WHEN 'awaiting_approval'
                        THEN 'Wait until its approval requests are decided (undolog approvals '
                             'list), then call again.'
                        ELSE 'Begin a new session for new calls (undolog.begin_session); this '
                             'one answers only calls made again, from its journal.'
                    END;
            END IF;
            IF p_tool_id IS NULL THEN
                IF v_tool_id IS NULL THEN
                    RAISE EXCEPTION USING
                        ERRCODE = 'UL017',
                        MESSAGE = pg_catalog.format('tool %s is not registered for %s',
                                                    p_tool_name, v_owner_role),
                        HINT = 'Register it with undolog.register_tool (the binding does so for '
                               'each decorated tool), or an operator registers it for this login.';
                END IF;
                IF v_tool_tier <> p_tier
                   OR (p_compensation IS DISTINCT FROM v_tool_compensation
                       AND (p_compensation -> 'name', coalesce(p_compensation -> 'args', '{}'::jsonb),
                            p_compensation -> 'max_attempts')
                           IS DISTINCT FROM (v_tool_compensation -> 'name',
                                             v_tool_compensation -> 'args',
                                             v_tool_compensation -> 'max_attempts')) THEN
                    RAISE EXCEPTION USING
                        ERRCODE = 'UL018',
                        MESSAGE = pg_catalog.format('the call of %s differs from its registration',
                                                    p_tool_name),
                        DETAIL = pg_catalog.format('registered: tier %s, compensation %s; called: '
                                                   'tier %s, compensation %s', v_tool_tier,
                                                   coalesce(v_tool_compensation::text, 'none'), p_tier,
                                                   coalesce(p_compensation::text, 'none')),
                        HINT = 'A tool''s registration fixes its tier and compensation: an operator '
                               'retires it first (undolog.retire_tool) to change them.';
                END IF;
            END IF;
            IF p_tier = 'irreversible' THEN
                PERFORM undolog.check_pending_approvals(v_owner_role);
            END IF;
            INSERT INTO undolog.undolog_effect_log
                (effect_id, session_id, executed_at, call_signature, step_index, tool_name, tier,
                 args, state, attempts, tool_id)
            VALUES
                (v_effect_id, p_session_id, v_executed_at, p_call_signature, p_step_index,
                 p_tool_name, p_tier, p_args,
                 CASE p_tier WHEN 'compensable' THEN 'executing' ELSE 'pending' END,
                 CASE p_tier WHEN 'compensable' THEN 1 ELSE 0 END, v_tool_id);
            IF p_tier = 'compensable' THEN
                effect_id := v_effect_id;
                action := 'execute';
                state := 'executing';
                RETURN NEXT;
                RETURN;
            END IF;
            INSERT INTO undolog.undolog_approval_requests (session_id, effect_id, executed_at)
            VALUES (p_session_id, v_effect_id, v_executed_at)
            RETURNING undolog_approval_requests.approval_id INTO v_approval_id;
            IF v_session_state = 'active' THEN
                PERFORM undolog.transition_session(p_session_id, 'awaiting_approval');
            END IF;
            RETURN QUERY SELECT v_effect_id, 'await_approval'::text, 'pending'::text,
                                NULL::jsonb, v_approval_id;
            RETURN;
        END IF;
    END IF;

    -- A call already journaled under this signature in this session (only this session's
    -- entries were searched: the same signature under another session is a forged one).
    -- The common case, a committed call replayed, is one statement: its effect, by primary
    -- key, counts the replay (the guard records it) if it is committed and the very same
    -- call. Anything else is locked and read, and answered by its state below. A call
    -- found committed there (its commit, in flight, held the row: READ COMMITTED waits
    -- for it and reads the committed version) is locked and known to be the same call,
    -- so the statement's second pass counts it; a third would be a bug, not a race.
    FOR v_pass IN 1..2 LOOP
        IF v_effect_id IS NOT NULL THEN
            UPDATE undolog.undolog_effect_log AS e
            SET replay_count = e.replay_count + 1, last_replayed_at = now()
            WHERE e.session_id = p_session_id AND e.effect_id = v_effect_id
              AND e.executed_at = v_executed_at AND e.state = 'committed'
              AND (e.step_index, e.tool_name, e.tier, e.args)
                  IS NOT DISTINCT FROM (p_step_index, p_tool_name, p_tier, p_args)
            RETURNING e.result_snapshot INTO result_snapshot;
            IF FOUND THEN
                IF v_wrote_before THEN
                    -- Back to what the client had when this call began: durable when an
                    -- earlier intercept of this transaction forced it so.
                    PERFORM pg_catalog.set_config('synchronous_commit', v_client_sync, true);
                ELSIF v_client_sync = 'off'
                      OR pg_catalog.current_setting('undolog.async_results', true) = 'on' THEN
                    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
                END IF;
                effect_id := v_effect_id;
                action := 'replay';
                state := 'committed';
                RETURN NEXT;
                RETURN;
            END IF;
        END IF;

        SELECT e.* INTO v_effect
        FROM undolog.undolog_undo_stack AS u
        JOIN undolog.undolog_effect_log AS e
            ON e.session_id = u.session_id AND e.effect_id = u.effect_id
           AND e.executed_at = u.executed_at
        WHERE u.session_id = p_session_id AND u.call_signature = p_call_signature
        FOR UPDATE OF e;
        IF (v_effect.session_id, v_effect.step_index, v_effect.tool_name, v_effect.tier,
            v_effect.args)
           IS DISTINCT FROM (p_session_id, p_step_index, p_tool_name, p_tier, p_args) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL005',
                MESSAGE = pg_catalog.format(
                    'call_signature %s is journaled for a different call', p_call_signature),
                DETAIL = 'The session, step, tool, tier or args differ from the journaled '
                         'call''s.',
                HINT = 'The signature is BLAKE3 of JCS([session_id, step_index, tool_name, '
                       'args]).';
        END IF;
        EXIT WHEN v_effect.state <> 'committed';
        IF v_pass = 2 THEN
            RAISE EXCEPTION USING
                ERRCODE = 'XX000',
                MESSAGE = pg_catalog.format('effect %s is committed and locked, and its '
                                            'replay was not counted', v_effect.effect_id),
                HINT = 'A bug: the replay''s UPDATE and the UL005 check above must test the '
                       'same columns.';
        END IF;
        v_effect_id := v_effect.effect_id;
        v_executed_at := v_effect.executed_at;
    END LOOP;

    CASE v_effect.state
    WHEN 'executing' THEN
        RETURN QUERY SELECT v_effect.effect_id, 'in_progress'::text, v_effect.state,
                            NULL::jsonb, NULL::uuid;
    WHEN 'rejected' THEN
        RETURN QUERY SELECT v_effect.effect_id, 'rejected'::text, v_effect.state,
                            NULL::jsonb, undolog.approval_of(v_effect.session_id, v_effect.effect_id);
    WHEN 'pending', 'approved' THEN
        IF v_effect.state = 'pending' AND v_effect.tier = 'irreversible' THEN
            SELECT a.approval_id, a.state INTO v_approval_id, v_approval_state
            FROM undolog.undolog_approval_requests AS a
            WHERE a.effect_id = v_effect.effect_id AND a.session_id = v_effect.session_id;
            IF v_approval_state IS DISTINCT FROM 'approved' THEN
                RETURN QUERY SELECT v_effect.effect_id, 'await_approval'::text, v_effect.state,
                                    NULL::jsonb, v_approval_id;
                RETURN;
            END IF;
            -- Approved, executed, then failed (reported, so it never took effect): the
            -- human's approval still stands for this very call; it goes back to approved.
            IF v_session_state = 'active' THEN
                UPDATE undolog.undolog_effect_log AS e
                SET state = 'approved'
                WHERE e.session_id = v_effect.session_id AND e.effect_id = v_effect.effect_id
                  AND e.executed_at = v_effect.executed_at;
            END IF;
        END IF;
        -- Approved, but another call of the session still waits for a person: nothing
        -- acts until every request is decided. Ask again once that one is.
        IF v_effect.tier = 'irreversible' AND v_session_state = 'awaiting_approval' THEN
            RETURN QUERY
            SELECT v_effect.effect_id, 'await_approval'::text, v_effect.state, NULL::jsonb,
                   (SELECT a.approval_id FROM undolog.undolog_approval_requests AS a
                    WHERE a.session_id = p_session_id AND a.state = 'pending'
                    ORDER BY a.requested_at, a.approval_id LIMIT 1);
            RETURN;
        END IF;
        -- A retry after fail(), or the approved call made again: execute it now.
        IF v_session_state <> 'active' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL010',
                MESSAGE = pg_catalog.format('session %s is %s: the call cannot run',
                                            p_session_id, v_session_state),
                HINT = CASE v_session_state
                    WHEN 'awaiting_approval'
                    THEN 'Wait until its approval requests are decided (undolog approvals '
                         'list), then call again.'
                    ELSE 'Begin a new session for new calls (undolog.begin_session).'
                END;
        END IF;
        -- Its entry was passed by a partial walk (rollback_to) that the session outlived:
        -- run now, it would be an effect below the undo stack's floor that no walk undoes.
        IF EXISTS (SELECT FROM undolog.undolog_undo_stack AS u
                   WHERE u.effect_id = v_effect.effect_id AND u.session_id = p_session_id
                     AND u.state = 'skipped')
           AND EXISTS (SELECT FROM undolog.undolog_sessions AS s
                       WHERE s.session_id = p_session_id AND s.undo_to IS NOT NULL) THEN
            PERFORM undolog.refuse_undone_step(v_effect);
        END IF;
        UPDATE undolog.undolog_effect_log AS e
        SET state = 'executing', attempts = e.attempts + 1, error = NULL
        WHERE e.session_id = v_effect.session_id AND e.effect_id = v_effect.effect_id
          AND e.executed_at = v_effect.executed_at;
        -- An approved call whose approver edited its args: 'execute' names the approval,
        -- and the body runs with the approved args (undolog.approval_edit), not these.
        v_approval_id := NULL;
        IF v_effect.tier = 'irreversible' THEN
            SELECT a.approval_id INTO v_approval_id
            FROM undolog.undolog_approval_requests AS a
            WHERE a.effect_id = v_effect.effect_id AND a.session_id = v_effect.session_id
              AND a.approved_args IS NOT NULL;
        END IF;
        RETURN QUERY SELECT v_effect.effect_id, 'execute'::text, 'executing'::text,
                            NULL::jsonb, v_approval_id;
    ELSE
        -- Undone by the walk. When a human's refusal sent the session there, that refusal
        -- is the answer to a run of the session made again, whether or not the walk has
        -- reached this call yet: 'rejected', with the refused call's approval_id.
        v_approval_id := undolog.session_refusal(p_session_id);
        IF v_approval_id IS NOT NULL THEN
            RETURN QUERY SELECT v_effect.effect_id, 'rejected'::text, v_effect.state,
                                NULL::jsonb, v_approval_id;
            RETURN;
        END IF;
        -- Undone by rollback_to: the session had one, and in these states a call is
        -- undone by nothing else (a whole walk starts by leaving failed), or its partial
        -- walk is running or halted.
        IF EXISTS (SELECT FROM undolog.undolog_sessions AS s
                   WHERE s.session_id = p_session_id AND s.undo_to IS NOT NULL
                     AND (s.state IN ('active', 'awaiting_approval', 'completed', 'failed')
                          OR s.undo_floor IS NOT NULL)) THEN
            PERFORM undolog.refuse_undone_step(v_effect);
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('effect %s is %s: it was undone and cannot run again',
                                        v_effect.effect_id, v_effect.state),
            HINT = 'Its undo ran: begin a new session to do it again (undolog.begin_session); '
                   'undolog sessions show ID says why it was undone.';
    END CASE;
END
$$;

REVOKE ALL ON FUNCTION undolog.journal_call(uuid, uuid, integer, text, text, jsonb, text, jsonb)
FROM public;
