-- undolog.undo_transition_allowed: the state machine of an undo-stack entry, as data.
--   pending             waiting for the walk (first time, or after a failed attempt)
--   compensating        in flight: claimed by a walker until claimed_until
--   compensated         its compensation succeeded                      (final)
--   compensation_failed its compensation exhausted its attempts
--   skipped             nothing to undo: the call never acted, or an operator resumed
--                       the walk past this barrier                       (final)
-- compensating -> pending is a failed attempt that will be retried; compensation_failed ->
-- pending is an operator's retry_compensation. The undo stack's guard trigger consults it.
CREATE OR REPLACE FUNCTION undolog.undo_transition_allowed(p_from text, p_to text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT CASE p_from
        WHEN 'pending' THEN p_to IN ('compensating', 'skipped')
        WHEN 'compensating' THEN p_to IN ('compensated', 'pending', 'compensation_failed')
        WHEN 'compensation_failed' THEN p_to = 'pending'
        ELSE false
    END
$$;

REVOKE ALL ON FUNCTION undolog.undo_transition_allowed(text, text) FROM public;
