-- undolog.effect_transition_allowed, replaced (0001 defined it): one transition added,
-- compensation_failed -> compensating (COMPENSABLE only). It is how an operator gives a
-- compensation that exhausted its retries a new attempt (undolog.retry_compensation); the
-- effect history keeps the failed attempt, and this transition follows it. Nothing else
-- takes it: the walk never leaves compensation_failed on its own, and only the operator
-- role can execute retry_compensation. Every other row is unchanged from 0001.
CREATE OR REPLACE FUNCTION undolog.effect_transition_allowed(
    p_tier text, p_from text, p_to text
)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_from = 'pending' AND p_to = 'executing' THEN p_tier = 'compensable'
        WHEN p_from = 'pending' AND p_to IN ('approved', 'rejected') THEN p_tier = 'irreversible'
        WHEN p_from = 'pending' AND p_to = 'replayed' THEN true
        WHEN p_from = 'executing' AND p_to IN ('committed', 'pending') THEN true
        WHEN p_from = 'executing' AND p_to = 'compensating' THEN p_tier = 'compensable'
        WHEN p_from = 'committed' AND p_to = 'compensating' THEN p_tier = 'compensable'
        WHEN p_from = 'approved' AND p_to = 'executing' THEN p_tier = 'irreversible'
        WHEN p_from = 'compensating' AND p_to IN ('compensated', 'compensation_failed')
            THEN p_tier = 'compensable'
        WHEN p_from = 'compensation_failed' AND p_to = 'compensating' THEN p_tier = 'compensable'
        ELSE false
    END
$$;

REVOKE ALL ON FUNCTION undolog.effect_transition_allowed(text, text, text) FROM public;
