-- undolog.intercept: the one call an agent makes before a journaled tool body runs.
-- One round trip; answers one row (effect_id, action, state, result_snapshot, approval_id)
-- where action says what the caller does next:
--   execute         run the body, then commit() or fail(). With an approval_id: an
--                   approver edited the call's args (approve_edited): run the body with
--                   the approved ones, read from undolog.approval_edit
--   replay          do not run it: result_snapshot is the committed result
--   await_approval  do not run it: a human must approve approval_id first
--   in_progress     the same call is being intercepted or executed right now: ask again
--   rejected        a human rejected this call; it will never run. Also the answer for
--                   a call the undo walk took (or is taking) because a human's refusal
--                   ended the session: state is then that call's, approval_id the
--                   refused call's (undolog.session_refusal).
-- A new COMPENSABLE call writes its effect and its undo-stack entry in this transaction,
-- before the body can run; a new IRREVERSIBLE call writes a pending effect, a barrier on
-- the undo stack and an approval request, and suspends the session (awaiting_approval).
-- A suspended session refuses new COMPENSABLE calls (UL010) but takes new IRREVERSIBLE
-- ones, each with its own request: several calls are asked at once, and the session
-- waits until every request is decided (decide_approval). An approved call made again
-- while another request is pending is answered await_approval with that request's id.
-- A new call must name a live registered tool of the session's owner (register_tool):
-- UL017 when none, UL018 when the call's tier, or its non-NULL compensation, differs from
-- the registration's. The effect records the registration (tool_id) and the undo entry
-- takes its compensation from the registration, never from the caller: p_tier and
-- p_compensation stay in the signature for the SQL API's callers, and are only checked.
-- A call already journaled (a replay, a retry) is not looked up again: its tier is part
-- of its identity (UL005), its undo entry was written when it was new, and calls
-- journaled before the registry existed have no registration to find.
-- Durability: whatever the client's synchronous_commit, a transaction that writes an
-- intent (a new call, a retry, an approved call made again) commits durably: a session
-- or database set to off must not let a body act with no durable intent. Replay
-- bookkeeping (replay_count, the 'replayed' event) commits asynchronously when the
-- client asked for asynchronous results (SET undolog.async_results = on): losing it in a
-- crash loses a counter, never an effect. Only when the replay is the transaction's
-- first write (no transaction id before it): after an intent, or anything else written
-- earlier in the same transaction, the client's setting stays.
-- The body is journal_call's, shared with intercept_tool, which names the tool by its
-- registration's id instead (the binding's hot path: the tool checked once, when it was
-- registered, not on every call).
CREATE OR REPLACE FUNCTION undolog.intercept(
    p_session_id uuid,
    p_step_index integer,
    p_tool_name text,
    p_tier text,
    p_args jsonb,
    p_call_signature text,
    p_compensation jsonb DEFAULT NULL
)
RETURNS TABLE (
    effect_id uuid, action text, state text, result_snapshot jsonb, approval_id uuid
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    -- The journaling itself is journal_call's, shared with intercept_tool.
    RETURN QUERY SELECT * FROM undolog.journal_call(p_session_id, NULL, p_step_index,
                                                    p_tool_name, p_tier, p_args,
                                                    p_call_signature, p_compensation);
END
$$;

REVOKE ALL ON FUNCTION undolog.intercept(uuid, integer, text, text, jsonb, text, jsonb)
FROM public;
