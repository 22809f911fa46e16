-- undolog.session_transition_allowed: the session state machine, as data
-- (docs/design/state-machines.md).
-- halted -> compensating is the operator resuming a halted walk.
-- active -> compensating and compensating -> active are a partial walk (rollback_to)
-- starting and ending; the sessions' guard also requires its undo_floor for them.
CREATE OR REPLACE FUNCTION undolog.session_transition_allowed(p_from text, p_to text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT coalesce(CASE p_from
        WHEN 'active' THEN p_to IN ('completed', 'failed', 'awaiting_approval', 'compensating')
        WHEN 'failed' THEN p_to = 'compensating'
        WHEN 'awaiting_approval' THEN p_to IN ('active', 'compensating')
        WHEN 'compensating' THEN p_to IN ('compensated', 'halted', 'active')
        WHEN 'halted' THEN p_to = 'compensating'
        ELSE false
    END, false)
$$;

REVOKE ALL ON FUNCTION undolog.session_transition_allowed(text, text) FROM public;
