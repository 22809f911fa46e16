-- undolog.session_state_history: every state a session went through, who moved it
-- (actor: the login) and why (detail). security_invoker: the history's RLS applies.
CREATE OR REPLACE VIEW undolog.session_state_history
WITH (security_invoker = TRUE) AS
SELECT
    h.session_id,
    h.history_id,
    h.from_state,
    h.to_state,
    h.at,
    h.actor,
    h.detail
FROM undolog.undolog_session_history AS h;

COMMENT ON VIEW undolog.session_state_history IS
'Every session state change (ORDER BY session_id, history_id), filtered by RLS.';

REVOKE ALL ON undolog.session_state_history FROM public;
