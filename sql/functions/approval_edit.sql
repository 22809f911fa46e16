-- undolog.approval_edit: the edit an approver made to an IRREVERSIBLE call before
-- approving it (undolog.approve_edited), for the agent that runs the call and its faces:
-- the requested args (the effect's), the approved args (what the body runs with), who
-- edited (decided_by, and the login: decided_role), when, and why. No row when the call's
-- approval made no edit, or the call is not the caller's to see (an agent login sees its
-- own sessions' calls, approvers and operators every one: session_user, as
-- undolog.approval_decision). Read-only. The binding reads it when intercept answers
-- 'execute' with an approval id, and when an IRREVERSIBLE call replays.
CREATE OR REPLACE FUNCTION undolog.approval_edit(p_session_id uuid, p_effect_id uuid)
RETURNS TABLE (
    approval_id uuid,
    tool_name text,
    requested_args jsonb,
    approved_args jsonb,
    decided_by text,
    decided_role text,
    decided_at timestamptz,
    reason text
)
-- PL/pgSQL, not SQL: a SQL body is validated when it is defined, which would tie this
-- function to the column a migration (0008) adds after an older engine's repeatables.
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT a.approval_id, e.tool_name, e.args, a.approved_args, a.decided_by,
           a.decided_role, a.decided_at, a.reason
    FROM undolog.undolog_approval_requests AS a
    JOIN undolog.undolog_sessions AS s ON s.session_id = a.session_id
    JOIN undolog.undolog_effect_log AS e
        ON e.session_id = a.session_id AND e.effect_id = a.effect_id
       AND e.executed_at = a.executed_at
    WHERE a.session_id = p_session_id AND a.effect_id = p_effect_id
      AND a.approved_args IS NOT NULL
      AND (s.owner_role = session_user
           OR undolog.caller_is_staff());
END
$$;

REVOKE ALL ON FUNCTION undolog.approval_edit(uuid, uuid) FROM public;
