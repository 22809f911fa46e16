-- undolog.call_approvals: the approval request of each IRREVERSIBLE call, found by what
-- the agent knows of its call (its session and call signature, or its step and tool), as
-- a framework adapter asks "was my call decided?". state is the request's own;
-- state_for_the_agent holds an approved call that has not run yet as pending while
-- another request of its session is: nothing acts while a person is being asked, and
-- intercept answers it await_approval. security_invoker: the reader's row-level security
-- applies (an agent reads its own sessions' requests; approvers and operators every one).
CREATE OR REPLACE VIEW undolog.call_approvals
WITH (security_invoker = TRUE) AS
SELECT
    e.session_id,
    e.call_signature,
    e.step_index,
    e.tool_name,
    a.approval_id,
    a.state,
    CASE
        WHEN
            a.state = 'approved' AND e.state IN ('approved', 'pending')
            AND EXISTS (
                SELECT FROM undolog.undolog_approval_requests AS o
                WHERE o.session_id = a.session_id AND o.state = 'pending'
            )
            THEN 'pending'
        ELSE a.state
    END AS state_for_the_agent,
    a.requested_at
FROM undolog.undolog_approval_requests AS a
INNER JOIN undolog.undolog_effect_log AS e
    ON
        a.session_id = e.session_id
        AND a.effect_id = e.effect_id
        AND a.executed_at = e.executed_at;

COMMENT ON VIEW undolog.call_approvals IS
'The approval request of each irreversible call, by session and call signature (or step and tool).';

REVOKE ALL ON undolog.call_approvals FROM public;
