-- undolog.approval_decision: what became of one approval request, for the agent that asked
-- (and its faces): the refused or approved call's tool, the outcome, who decided, when
-- and why, the tool's on_reject, and the session's state now (session_continues: the
-- session can take further calls, because the refusal kept it going). No row when the
-- request is unknown or not the caller's to see, by the rule of the journal's row-level
-- security: an agent login sees the requests of the sessions it began, approvers and
-- operators every one (session_user: SET ROLE changes nothing). Read-only.
-- decided_by is NULL for the engine's own expiry (decision 'expired').
CREATE OR REPLACE FUNCTION undolog.approval_decision(p_approval_id uuid)
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
    SELECT
        a.approval_id,
        a.session_id,
        a.effect_id,
        e.tool_name,
        a.state,
        a.decided_by,
        a.decided_at,
        a.reason,
        coalesce(t.on_reject, 'fail_session'),
        s.state,
        s.state IN ('active', 'awaiting_approval')
    FROM undolog.undolog_approval_requests AS a
    JOIN undolog.undolog_sessions AS s ON s.session_id = a.session_id
    LEFT JOIN undolog.undolog_effect_log AS e
        ON e.session_id = a.session_id AND e.effect_id = a.effect_id
       AND e.executed_at = a.executed_at
    LEFT JOIN undolog.undolog_tools AS t ON t.tool_id = e.tool_id
    WHERE a.approval_id = p_approval_id
      AND (s.owner_role = session_user
           OR undolog.caller_is_staff())
$$;

REVOKE ALL ON FUNCTION undolog.approval_decision(uuid) FROM public;
