-- undolog.decided_approvals: every decision, for audit. decision is approved, rejected or
-- expired; decided_by is the name the approver gave (NULL when the engine expired the
-- request), decided_role the database login that recorded it. Same access as
-- pending_approvals (owner's rights, so approver and operator only).
-- New columns go at the end: CREATE OR REPLACE VIEW keeps the existing ones in place.
CREATE OR REPLACE VIEW undolog.decided_approvals AS
SELECT
    a.approval_id,
    a.session_id,
    a.effect_id,
    e.step_index,
    e.tool_name,
    e.args,
    a.state AS decision,
    a.decided_by,
    a.reason,
    a.decided_at,
    a.decided_role,
    a.requested_at,
    a.expires_at,
    e.state AS effect_state,
    a.decided_at - a.requested_at AS waited,
    -- Who asked: the name the agent chose (agent), the login that began the session
    -- (owner_role) and the login that made the call (requested_by).
    s.agent,
    s.owner_role,
    e.intercepted_by AS requested_by,
    e.tier,
    -- What the approver let run instead of the requested args (edit, then approve), or
    -- NULL when the call ran as it was asked.
    a.approved_args
FROM undolog.undolog_approval_requests AS a
INNER JOIN undolog.undolog_sessions AS s ON a.session_id = s.session_id
LEFT JOIN undolog.undolog_effect_log AS e
    ON
        a.session_id = e.session_id
        AND a.effect_id = e.effect_id
        AND a.executed_at = e.executed_at
WHERE a.state <> 'pending';

COMMENT ON VIEW undolog.decided_approvals IS
'Decided approval requests: decision, who (decided_by, decided_role), why and when.';

REVOKE ALL ON undolog.decided_approvals FROM public;
