-- undolog.pending_approvals: what waits for a human (ORDER BY requested_at: oldest first).
-- expired is true once the deadline has passed: such a request can no longer be
-- approved (UL015) and the next expire_approvals() closes it.
-- Views run with their owner's rights, so row-level security does not filter them:
-- only the approver and operator roles, who read every session, may select them.
-- New columns go at the end: CREATE OR REPLACE VIEW keeps the existing ones in place.
CREATE OR REPLACE VIEW undolog.pending_approvals AS
SELECT
    a.approval_id,
    a.session_id,
    a.effect_id,
    e.step_index,
    e.tool_name,
    e.args,
    a.requested_at,
    a.expires_at,
    s.agent,
    s.state AS session_state,
    now() - a.requested_at AS age,
    coalesce(a.expires_at <= now(), FALSE) AS expired,
    -- The login that made the call: it may not approve it (decide_approval, 42501).
    e.intercepted_by AS requested_by,
    -- Who the session really is: agent above is a name the agent chose for itself, the
    -- owner the login that began the session (session_user, not forgeable by the agent).
    s.owner_role,
    e.tier,
    -- What the agent says the session is for, when it said so (metadata's 'purpose'
    -- string): a claim, shown as such.
    CASE
        WHEN jsonb_typeof(s.metadata -> 'purpose') = 'string'
            THEN s.metadata ->> 'purpose'
    END AS purpose
FROM undolog.undolog_approval_requests AS a
INNER JOIN undolog.undolog_sessions AS s ON a.session_id = s.session_id
-- LEFT: a request outlives its effect's month if that partition was dropped.
LEFT JOIN undolog.undolog_effect_log AS e
    ON
        a.session_id = e.session_id
        AND a.effect_id = e.effect_id
        AND a.executed_at = e.executed_at
WHERE a.state = 'pending';

COMMENT ON VIEW undolog.pending_approvals IS
'Approval requests waiting for a human: the call (tool, args), its age and deadline.';

REVOKE ALL ON undolog.pending_approvals FROM public;
