-- undolog.due_sessions: every session a recovery worker must act on now, with the moment
-- it became due. The one statement of that rule: recover() answers its failed and
-- compensating rows, `undolog health` measures the worker's lag on all of them.
-- * failed: due since it failed; the walk has not started.
-- * active with its lease run out: its agent died; recover() fails it (due since the
--   lease expired).
-- * compensating, where claim_compensation would hand out an entry or finish the walk:
--   the top unfinished entry is in flight with an expired claim (due since the claim
--   expired), pending with its retry time passed (due since that time, or since the walk
--   last moved if later), or there is no unfinished entry left (due since the last entry
--   finished).
-- A partial walk (rollback_to) needs no rule of its own: once nothing is left above its
-- floor, the top unfinished entry is one below it, never claimed and so due since it was
-- pushed, and the claim that follows sends the session back to active.
-- awaiting_approval and halted sessions wait for a person, not for a worker: never due.
-- security_invoker: the reader's row-level security applies (recover() reads it as the
-- owner and sees every session).
-- The laterals repeat their ON condition inside (s.state = 'compensating'): planned as a
-- one-time filter, it spares a failed or active session's row the two undo-stack lookups
-- that the ON clause would only throw away.
CREATE OR REPLACE VIEW undolog.due_sessions
WITH (security_invoker = TRUE) AS
SELECT
    s.session_id,
    s.state,
    s.updated_at,
    CASE
        WHEN s.state = 'failed' THEN s.updated_at
        WHEN s.state = 'active' THEN s.lease_expires_at
        WHEN head.state = 'compensating' THEN head.claimed_until
        ELSE coalesce(greatest(head.next_attempt_at, moved.last_at), s.updated_at)
    END AS due_since
FROM undolog.undolog_sessions AS s
LEFT JOIN LATERAL (
    SELECT
        u.state,
        u.next_attempt_at,
        u.claimed_until
    FROM undolog.undolog_undo_stack AS u
    WHERE
        u.session_id = s.session_id AND u.state IN ('pending', 'compensating')
        AND s.state = 'compensating'
    ORDER BY u.stack_position DESC
    LIMIT 1
) AS head ON s.state = 'compensating'
LEFT JOIN LATERAL (
    SELECT max(u.updated_at) AS last_at
    FROM undolog.undolog_undo_stack AS u
    WHERE u.session_id = s.session_id AND s.state = 'compensating'
) AS moved ON s.state = 'compensating'
WHERE
    s.state = 'failed'
    OR (s.state = 'active' AND s.lease_expires_at <= now())
    OR (
        s.state = 'compensating'
        AND (
            head.state IS NULL
            OR (head.state = 'pending' AND head.next_attempt_at <= now())
            OR (head.state = 'compensating' AND head.claimed_until <= now())
        )
    );

COMMENT ON VIEW undolog.due_sessions IS
'Sessions a recovery worker must act on now (failed, lease expired, compensating with a '
'due entry or none left), with the moment each became due.';

REVOKE ALL ON undolog.due_sessions FROM public;
