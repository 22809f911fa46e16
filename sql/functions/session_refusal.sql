-- undolog.session_refusal: the approval request whose refusal (rejected, or expired)
-- sent the session to its undo walk, or NULL when none did. A refused call of a tool
-- registered on_reject 'continue' never ends its session, so it is not one; a call
-- journaled before the registry existed (no registration) follows the rule and is.
-- The first such refusal by decision time: later ones found the session already undone.
CREATE OR REPLACE FUNCTION undolog.session_refusal(p_session_id uuid)
RETURNS uuid
LANGUAGE sql
STABLE
SET search_path = undolog, pg_temp
AS $$
    SELECT a.approval_id
    FROM undolog.undolog_approval_requests AS a
    JOIN undolog.undolog_effect_log AS e
        ON e.session_id = a.session_id AND e.effect_id = a.effect_id
       AND e.executed_at = a.executed_at
    LEFT JOIN undolog.undolog_tools AS t ON t.tool_id = e.tool_id
    WHERE a.session_id = p_session_id AND a.state IN ('rejected', 'expired')
      AND coalesce(t.on_reject, 'fail_session') = 'fail_session'
    ORDER BY a.decided_at, a.approval_id
    LIMIT 1
$$;

REVOKE ALL ON FUNCTION undolog.session_refusal(uuid) FROM public;
