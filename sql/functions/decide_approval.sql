-- undolog.decide_approval: the one path by which an approval request gets its outcome;
-- approve(), reject() and expire_approvals() call it. p_decision is 'approved',
-- 'rejected' or 'expired' (the engine's own decision: p_decided_by is then NULL).
-- Answers the state recorded, or NULL when an expiry found the request already decided
-- (a human or another expirer got there first: not an error for a sweep).
--
--   approved  effect pending -> approved; the session goes awaiting_approval -> active,
--             with a fresh lease, once no request of it is pending any more. The agent
--             then makes the same call again and intercept executes it, once.
--   rejected  effect pending -> rejected (terminal). An awaiting_approval session goes
--   expired   to compensating, for the undo walk; or, when the call's registered tool
--             says on_reject 'continue', back to active (with a fresh lease) once no
--             request of it is pending any more: the refusal is recorded (the request,
--             the effect's error, the session history's detail) and the agent, making
--             the call again, is answered 'rejected' and may go on with other calls.
--             A refusal that sends the session to compensating also closes the
--             session's other pending requests (several irreversible calls are asked at
--             once): each takes the same outcome and decider, its reason names this
--             refusal, and its effect goes pending -> rejected (it never ran).
--
-- The deadline (expires_at) is checked before anything is written, against the clock
-- (clock_timestamp, not now(): now() is when the transaction began, and a decider who
-- opened one before the deadline could otherwise approve at any time after it); the
-- same instant is the decision's decided_at. Once it has passed the request is expired,
-- whoever asks: approving it raises UL015 and writes nothing (a raise
-- rolls the transaction back, so the expiry itself is recorded by expire_approvals() or
-- by a reject); rejecting it does not raise, since "do not run it" is what the human
-- asked for, and records the outcome truthfully as 'expired' (with who closed it).
--
-- Lock order is session, then approval request, then effect: the same order as intercept
-- (session FOR SHARE, then the effect FOR UPDATE), so a decision racing an intercept of
-- the same call waits instead of deadlocking.
--
-- p_args (NULL but for an approval by undolog.approve_edited; no default, so that an
-- engine being upgraded never holds two candidates for a call) are the arguments the approver
-- approves instead of the requested ones. They are checked as intercept checks a call's
-- (a JSON object, UL008; within the payload limits, UL009) and must name the same
-- arguments as the request (UL024): an edit changes values, never the tool, the session
-- or which parameters the body gets. Arguments equal to the requested ones are no edit
-- (approved_args stays NULL). An edit records approved_args on the request and an
-- 'args_edited' row in the effect's history; the effect's args stay as requested, since
-- they are the call's identity: the same call made again finds this approval, and
-- intercept's answer 'execute' then names the approval, for undolog.approval_edit.
-- An edit of a request no longer pending raises UL023 (no edit is ever recorded after
-- the decision), before the checks of an approval.
CREATE OR REPLACE FUNCTION undolog.decide_approval(
    p_approval_id uuid, p_decision text, p_decided_by text, p_reason text,
    p_args jsonb
)
RETURNS text
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_session_id uuid;
    v_session_state text;
    v_owner_role text;
    v_intercepted_by text;
    v_request undolog.undolog_approval_requests;
    v_outcome text := p_decision;
    v_tool_name text;
    v_on_reject text;
    v_why text;
    v_decided_at timestamptz;
    v_other undolog.undolog_approval_requests;
    v_other_why text;
    v_requested_args jsonb;
    v_approved_args jsonb;
    v_bound record;
    v_creator record;
BEGIN
    IF p_decision IS NULL OR p_decision NOT IN ('approved', 'rejected', 'expired') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('a decision is approved, rejected or expired, not %s',
                                        coalesce(pg_catalog.quote_literal(p_decision), 'NULL')),
            HINT = 'Decide with undolog.approve, undolog.approve_edited or undolog.reject.';
    END IF;
    IF p_approval_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'UL008', MESSAGE = 'approval_id is required',
            HINT = 'Pass the approval_id of a request: undolog approvals list shows them.';
    END IF;
    IF p_args IS NOT NULL THEN
        IF p_decision <> 'approved' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL008',
                MESSAGE = 'only an approval carries edited args: a refusal runs nothing',
                HINT = 'Reject without args, or approve with them: undolog.approve_edited.';
        END IF;
        IF jsonb_typeof(p_args) <> 'object' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL008',
                MESSAGE = pg_catalog.format('args must be a JSON object, not %s',
                                            jsonb_typeof(p_args)),
                HINT = 'Pass the edited args as a JSON object of the tool''s named arguments, as '
                       'the call''s own.';
        END IF;
        PERFORM undolog.check_payload('args', p_args);
    END IF;
    -- Blank is any white space or invisible character, in any script (undolog.is_blank).
    IF p_decision <> 'expired'
       AND (undolog.is_blank(p_decided_by) OR length(p_decided_by) > 200) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'decided_by must name who decides: non-blank text of at most 200 characters',
            HINT = 'Pass who decides (for example ''alice''), non-blank, at most 200 characters.';
    END IF;
    IF length(p_reason) > 8192 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('reason is %s characters, over the limit of 8192',
                                        length(p_reason)),
            HINT = 'Give a shorter reason (at most 8192 characters); link to a longer document.';
    END IF;

    SELECT a.session_id INTO v_session_id
    FROM undolog.undolog_approval_requests AS a
    WHERE a.approval_id = p_approval_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL013',
            MESSAGE = pg_catalog.format('unknown approval %s', p_approval_id),
            HINT = 'Check the id: undolog approvals list shows the pending requests, undolog '
                   'sessions show ID every request of a session.';
    END IF;

    -- Bounded: an agent's open transaction holding its session answers UL030 after
    -- lock_session's wait, rather than stalling the person (or expire_approvals).
    SELECT s.state, s.owner_role INTO STRICT v_session_state, v_owner_role
    FROM undolog.lock_session(v_session_id) AS s;

    -- Nobody approves their own call: a login that holds both the agent and the approver
    -- role must not say yes to what it asked for itself (a superuser may: it can anyway).
    -- "Its own" is the session it owns, and the call it made (intercepted_by), wherever
    -- it made it: an approver may intercept into another agent's session. And a login
    -- that can become the maker, or that the maker can become, is the maker: a member of
    -- another login may SET ROLE to it and, as it, set its password (PostgreSQL lets a
    -- role change its own), then log in as it; so an approver granted an agent's login
    -- made calls as the agent and approved them as herself, and an agent granted an
    -- approver's login took hers (red team round 12). A name no role bears any more
    -- (the maker's login dropped since) is no member of anything: not asked about, as
    -- pg_has_role would raise for it.
    SELECT e.intercepted_by INTO v_intercepted_by
    FROM undolog.undolog_approval_requests AS a
    JOIN undolog.undolog_effect_log AS e
        ON e.session_id = a.session_id AND e.effect_id = a.effect_id
       AND e.executed_at = a.executed_at
    WHERE a.approval_id = p_approval_id AND a.session_id = v_session_id;
    -- PostgreSQL 15 lets a CREATEROLE login set the password of every role but a
    -- superuser's, and grant itself any such role, as a member of none: an approver
    -- holding it takes an agent's login, or makes one of its own to make calls with
    -- (CREATE ROLE ... IN ROLE undolog_agent), and an agent holding it makes itself an
    -- approver's login, and no membership shows it. So there a CREATEROLE login is
    -- either side of any non-superuser's call. (PostgreSQL 16 makes it a member, with
    -- ADMIN OPTION, of exactly the roles it may alter: pg_has_role below sees those.)
    SELECT me.rolcreaterole AS mine, CASE WHEN me.rolcreaterole THEN me.rolname
                                          ELSE r.rolname END AS login
    INTO v_creator
    FROM pg_catalog.pg_roles AS me
    JOIN pg_catalog.pg_roles AS r ON r.rolname IN (v_owner_role, v_intercepted_by)
    WHERE me.rolname = session_user AND NOT me.rolsuper AND NOT r.rolsuper
      AND (me.rolcreaterole OR r.rolcreaterole)
      AND pg_catalog.current_setting('server_version_num')::int < 160000
    LIMIT 1;
    IF p_decision = 'approved' AND v_creator.login IS NOT NULL
       AND session_user NOT IN (v_owner_role, v_intercepted_by) THEN
        RAISE EXCEPTION USING
            ERRCODE = '42501',
            MESSAGE = pg_catalog.format('approval %s: a login cannot approve its own call',
                                        p_approval_id),
            DETAIL = pg_catalog.format(
                '%s holds CREATEROLE: on PostgreSQL 15 it may set the password of any login '
                'but a superuser''s, or make a login of its own, so it may be the maker of '
                'this call and its approver both.', v_creator.login),
            HINT = CASE WHEN v_creator.mine
                THEN pg_catalog.format('Another approver must decide; and ALTER ROLE %s '
                                       'NOCREATEROLE: an approver must not hold CREATEROLE.',
                                       v_creator.login)
                ELSE pg_catalog.format('A superuser must decide, or ALTER ROLE %s NOCREATEROLE '
                                       'first: an agent must not hold CREATEROLE.',
                                       v_creator.login)
            END;
    END IF;
    IF p_decision = 'approved'
       AND (session_user IN (v_owner_role, v_intercepted_by)
            OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r
                       WHERE r.rolname IN (v_owner_role, v_intercepted_by)
                         AND (pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
                              -- a superuser is a member of every role to pg_has_role:
                              -- its calls are not every approver's own
                              OR (NOT r.rolsuper
                                  AND pg_catalog.pg_has_role(r.oid, session_user, 'MEMBER')))))
       AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = session_user)
    THEN
        IF session_user IN (v_owner_role, v_intercepted_by) THEN
            RAISE EXCEPTION USING
                ERRCODE = '42501',
                MESSAGE = pg_catalog.format('approval %s: a login cannot approve its own call',
                                            p_approval_id),
                HINT = 'Another approver must decide.';
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = '42501',
            MESSAGE = pg_catalog.format('approval %s: a login cannot approve its own call',
                                        p_approval_id),
            DETAIL = pg_catalog.format(
                'The call is %s''s, and %s is a member of that login or it of %s: either may '
                'SET ROLE to the other and set its password.',
                coalesce(v_intercepted_by, v_owner_role), session_user, session_user),
            HINT = 'Another approver must decide; and ask whoever manages the database''s roles '
                   'to REVOKE the membership: a person''s login and an agent''s must not be '
                   'members of each other (undolog health names every such pair).';
    END IF;
    -- Re-read under lock: a concurrent decision may have committed since the lookup.
    SELECT a.* INTO STRICT v_request
    FROM undolog.undolog_approval_requests AS a
    WHERE a.approval_id = p_approval_id AND a.session_id = v_session_id
    FOR UPDATE;

    IF v_request.state <> 'pending' THEN
        IF p_decision = 'expired' THEN
            RETURN NULL;
        END IF;
        IF p_args IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL023',
                MESSAGE = pg_catalog.format(
                    'approval %s was already decided (%s): its args can no longer be edited',
                    p_approval_id, v_request.state),
                DETAIL = pg_catalog.format('%s at %s by %s', v_request.state,
                                           v_request.decided_at,
                                           coalesce(v_request.decided_by,
                                                    'the engine (deadline)')),
                HINT = 'The decision stands. If the call must run with other args, reject a new '
                       'request for it instead, or ask the agent to call again.';
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'UL014',
            MESSAGE = pg_catalog.format('approval %s was already decided: %s', p_approval_id,
                                        v_request.state),
            DETAIL = pg_catalog.format('%s at %s by %s', v_request.state, v_request.decided_at,
                                       coalesce(v_request.decided_by, 'the engine (deadline)')),
            HINT = 'A decision is final; nothing was changed. Read it with undolog sessions show '
                   '(the session''s timeline).';
    END IF;

    v_decided_at := pg_catalog.clock_timestamp();
    IF v_request.expires_at <= v_decided_at THEN
        IF p_decision = 'approved' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL015',
                MESSAGE = pg_catalog.format(
                    'approval %s expired at %s: it can no longer be approved',
                    p_approval_id, v_request.expires_at),
                HINT = 'The call will not run. undolog approvals expire (undolog.'
                       'expire_approvals()) or a rejection records the expiry and starts '
                       'the session''s undo walk.';
        END IF;
        v_outcome := 'expired';
    ELSIF p_decision = 'expired' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('approval %s is not past its deadline (%s)',
                                        p_approval_id,
                                        coalesce(v_request.expires_at::text, 'none')),
            HINT = 'Approve or reject it now, or wait for its deadline: undolog.expire_approvals() '
                   'expires it then.';
    END IF;

    -- Approving is only meaningful while the session waits for it: if the session was
    -- sent to its undo walk (another of its calls was refused), the call can never run.
    IF v_outcome = 'approved' AND v_session_state <> 'awaiting_approval' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL010',
            MESSAGE = pg_catalog.format('session %s is %s: its calls can no longer be approved',
                                        v_session_id, v_session_state),
            HINT = 'Reject the request instead.';
    END IF;

    -- A call journaled before the registry existed has no registration: the rule.
    SELECT e.tool_name, coalesce(t.on_reject, 'fail_session'), e.args
    INTO v_tool_name, v_on_reject, v_requested_args
    FROM undolog.undolog_effect_log AS e
    LEFT JOIN undolog.undolog_tools AS t ON t.tool_id = e.tool_id
    WHERE e.session_id = v_request.session_id AND e.effect_id = v_request.effect_id
      AND e.executed_at = v_request.executed_at;

    IF p_args IS NOT NULL AND p_args IS DISTINCT FROM v_requested_args THEN
        -- The body is called with these: a parameter it lacks, or one missing that has no
        -- default, would fail it after a person approved it, or call what nobody asked.
        IF ARRAY(SELECT k FROM jsonb_object_keys(p_args) AS k ORDER BY k)
           IS DISTINCT FROM ARRAY(SELECT k FROM jsonb_object_keys(v_requested_args) AS k
                                  ORDER BY k) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL024',
                MESSAGE = pg_catalog.format(
                    'approval %s: the edited args must name the same arguments as the call '
                    'of %s', p_approval_id, coalesce(v_tool_name, '?')),
                DETAIL = pg_catalog.format(
                    'requested: %s; edited: %s',
                    (SELECT string_agg(k, ', ' ORDER BY k)
                     FROM jsonb_object_keys(v_requested_args) AS k),
                    (SELECT string_agg(k, ', ' ORDER BY k) FROM jsonb_object_keys(p_args) AS k)),
                HINT = 'An edit changes the values of the call''s arguments; to call '
                       'something else, reject the call and say what to do instead.';
        END IF;
        v_approved_args := p_args;
    END IF;

    v_why := CASE v_outcome
        WHEN 'approved' THEN NULL
        WHEN 'rejected' THEN pg_catalog.format('rejected by %s', p_decided_by)
        -- The deadline as the chain writes times (UTC, ISO 8601), not in the decider's
        -- DateStyle and TimeZone: this text is the agent's record.
        ELSE pg_catalog.format('approval expired at %s', undolog.chain_time(v_request.expires_at))
             -- || not format(): format() renders NULL as '', || keeps it NULL.
             || coalesce(' (closed by ' || p_decided_by || ')', '')
    END || coalesce(': ' || p_reason, '');

    -- The writes, their waits bounded as lock_session's: an agent that committed another
    -- of its calls in a transaction it keeps open holds the session's chain head, which
    -- the history rows below link to, and the person's decision waited for it as long as
    -- that stayed open (the SQL API's fuzz, round 9). Past the wait, UL030 and nothing
    -- written; no lock is taken in another order than before, only not waited for ever.
    v_bound := undolog.bound_lock_wait();
    BEGIN
        -- The effect's guard trigger checks pending -> approved/rejected (IRREVERSIBLE only)
        -- and appends the transition to its history; the refusal's why becomes its error.
        UPDATE undolog.undolog_effect_log AS e
        SET state = CASE v_outcome WHEN 'approved' THEN 'approved' ELSE 'rejected' END,
            error = v_why
        WHERE e.session_id = v_request.session_id AND e.effect_id = v_request.effect_id
          AND e.executed_at = v_request.executed_at;

        UPDATE undolog.undolog_approval_requests AS a
        SET state = v_outcome,
            decided_at = v_decided_at,
            decided_by = p_decided_by,
            reason = p_reason,
            decided_role = session_user,
            approved_args = v_approved_args
        WHERE a.approval_id = v_request.approval_id AND a.session_id = v_request.session_id;

        IF v_approved_args IS NOT NULL THEN
            -- The edit in the effect's own history, beside its pending -> approved row: what
            -- runs differs from the effect's args, and the history says so, who and why.
            INSERT INTO undolog.undolog_effect_history
                (session_id, effect_id, executed_at, event, from_state, to_state, detail)
            VALUES (
                v_request.session_id, v_request.effect_id, v_request.executed_at, 'args_edited',
                'approved', 'approved',
                pg_catalog.jsonb_build_object('approval_id', v_request.approval_id,
                                              'approved_args', v_approved_args,
                                              'edited_by', p_decided_by, 'reason', p_reason));
        END IF;

        IF v_outcome = 'approved' OR v_on_reject = 'continue' THEN
            IF v_session_state = 'awaiting_approval'
               AND NOT EXISTS (SELECT FROM undolog.undolog_approval_requests AS a
                               WHERE a.session_id = v_session_id AND a.state = 'pending') THEN
                -- The history row of this move names the refusals decided in this
                -- transaction, with their reasons (sessions_guard).
                PERFORM undolog.transition_session(v_session_id, 'active');
                -- The human may have taken longer than the lease: without a fresh one, the
                -- resumed session would look dead to recovery before the agent's next call.
                UPDATE undolog.undolog_sessions AS s
                SET lease_expires_at = undolog.utc_after(now(), s.lease_duration)
                WHERE s.session_id = v_session_id;
            END IF;
        ELSIF v_session_state = 'awaiting_approval' THEN
            PERFORM undolog.transition_session(
                v_session_id, 'compensating',
                pg_catalog.format('irreversible call %s (approval %s) %s',
                                  coalesce(v_tool_name, '?'), p_approval_id, v_why));
            -- The session's other pending requests (asked in the same turn) can never run
            -- now: they are closed with this outcome, by the same decider, saying why, so
            -- that no person is left asked about a call of an ended session. Their calls
            -- never acted: the walk skips their barriers. Closed a moment after this
            -- refusal (clock_timestamp), so that this one stays the session's first refusal
            -- (session_refusal). Requests first, then effects: the lock order above.
            FOR v_other IN
                SELECT a.* FROM undolog.undolog_approval_requests AS a
                WHERE a.session_id = v_session_id AND a.state = 'pending'
                ORDER BY a.requested_at, a.approval_id
                FOR UPDATE
            LOOP
                v_other_why := pg_catalog.format(
                    'not decided on its own: approval %s (%s) was %s, which sent the session '
                    'to its undo walk', p_approval_id, coalesce(v_tool_name, '?'), v_outcome);
                UPDATE undolog.undolog_approval_requests AS a
                SET state = v_outcome,
                    decided_at = pg_catalog.clock_timestamp(),
                    decided_by = p_decided_by,
                    reason = v_other_why,
                    decided_role = session_user
                WHERE a.approval_id = v_other.approval_id AND a.session_id = v_other.session_id;
                UPDATE undolog.undolog_effect_log AS e
                SET state = 'rejected', error = v_other_why
                WHERE e.session_id = v_other.session_id AND e.effect_id = v_other.effect_id
                  AND e.executed_at = v_other.executed_at AND e.state = 'pending';
            END LOOP;
        END IF;
    -- deadlock_detected: the agent, its transaction holding that head, then waits for
    -- the session itself (a heartbeat, its next call): as rollback_session, UL030.
    EXCEPTION WHEN lock_not_available THEN
        PERFORM undolog.session_held(v_session_id, v_bound.p_wait);
    WHEN deadlock_detected THEN  -- NULL: a deadlock, not the bound, ended the wait
        PERFORM undolog.session_held(v_session_id, NULL);
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_bound.p_caller_timeout, true);
    RETURN v_outcome;
END
$$;

REVOKE ALL ON FUNCTION undolog.decide_approval(uuid, text, text, text, jsonb) FROM public;
