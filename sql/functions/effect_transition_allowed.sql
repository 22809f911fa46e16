-- undolog.effect_transition_allowed: the effect state machine, as data (docs/design/
-- state-machines.md draws it and says why each edge exists).
-- The effect log's guard trigger consults it on every state change, so no code path
-- (API function or the owner's own UPDATE) can take a transition that is not here.
-- Never NULL: an unknown tier or state is simply not allowed.
-- pending -> replayed is in the contract but the engine never takes it: a duplicate
-- signature replays the original effect, which stays committed: a replay never creates
-- a second effect, it appends a history row to the first.
CREATE OR REPLACE FUNCTION undolog.effect_transition_allowed(
    p_tier text, p_from text, p_to text
)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT p_tier IN ('compensable', 'irreversible') AND coalesce(CASE
        WHEN p_from = 'pending' AND p_to = 'executing' THEN p_tier = 'compensable'
        WHEN p_from = 'pending' AND p_to IN ('approved', 'rejected') THEN p_tier = 'irreversible'
        WHEN p_from = 'pending' AND p_to = 'replayed' THEN true
        WHEN p_from = 'executing' AND p_to IN ('committed', 'pending') THEN true
        WHEN p_from = 'executing' AND p_to = 'compensating' THEN p_tier = 'compensable'
        WHEN p_from = 'committed' AND p_to = 'compensating' THEN p_tier = 'compensable'
        WHEN p_from = 'approved' AND p_to = 'executing' THEN p_tier = 'irreversible'
        WHEN p_from = 'compensating' AND p_to IN ('compensated', 'compensation_failed')
            THEN p_tier = 'compensable'
        -- An operator's retry_compensation gives a compensation
        -- that exhausted its attempts one more (the failed attempt stays in the history).
        WHEN p_from = 'compensation_failed' AND p_to = 'compensating'
            THEN p_tier = 'compensable'
        ELSE false
    END, false)
$$;

REVOKE ALL ON FUNCTION undolog.effect_transition_allowed(text, text, text) FROM public;
