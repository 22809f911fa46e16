-- undolog.ending_decision: the decision that ended a session, when a person's refusal (a
-- rejection, or an expiry) sent it to its undo walk: approval_decision of the request
-- session_refusal names, the rule intercept answers a run made again by. No row when no
-- refusal ended it, or when the session is not the caller's to see (approval_decision's
-- rule: an agent login sees the sessions it began, approvers and operators every one).
-- Read-only; the framework adapters read it to tell the model why its run stopped.
CREATE OR REPLACE FUNCTION undolog.ending_decision(p_session_id uuid)
RETURNS TABLE (
    approval_id uuid,
    session_id uuid,
    effect_id uuid,
    tool_name text,
    decision text,
    decided_by text,
    decided_at timestamptz,
    reason text,
    on_reject text,
    session_state text,
    session_continues boolean
)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT d.*
    FROM undolog.approval_decision(undolog.session_refusal(p_session_id)) AS d
$$;

REVOKE ALL ON FUNCTION undolog.ending_decision(uuid) FROM public;
