-- undolog.session_approvals: every approval request, pending or decided, with who decided
-- (decided_by, and decided_role: the login that recorded it), why and when.
-- security_invoker, unlike pending_approvals and decided_approvals: the reader's
-- row-level security applies, so an agent reads the requests of its own sessions.
CREATE OR REPLACE VIEW undolog.session_approvals
WITH (security_invoker = TRUE) AS
SELECT
    a.session_id,
    a.approval_id,
    a.effect_id,
    e.step_index,
    e.tool_name,
    a.state,
    a.requested_at,
    a.expires_at,
    a.decided_at,
    a.decided_by,
    a.decided_role,
    a.reason
FROM undolog.undolog_approval_requests AS a
LEFT JOIN undolog.undolog_effect_log AS e
    ON
        a.session_id = e.session_id
        AND a.effect_id = e.effect_id
        AND a.executed_at = e.executed_at;

COMMENT ON VIEW undolog.session_approvals IS
'Approval requests of the sessions the reader may see (RLS), with their decisions.';

REVOKE ALL ON undolog.session_approvals FROM public;
