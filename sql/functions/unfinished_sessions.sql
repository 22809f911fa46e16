-- undolog.unfinished_sessions: the sessions that are not finished and have effects whose
-- executed_at lies in [p_from, p_to): a month holding them must not be dropped, since
-- their undo walk (or a human's decision) may still need those effects. Finished means
-- completed, compensated, or halted and abandoned by an operator (resolved_at set:
-- nothing will ever move it again); active, awaiting_approval, failed (its walk is yet to
-- run), compensating and an unresolved halted session all hold their months. A session
-- state that a later migration adds holds its months too until it is listed here:
-- refusing is the safe mistake.
-- Walks the (few) unfinished sessions by undolog_sessions_unfinished_idx, each probing
-- the month's primary key by session_id.
CREATE OR REPLACE FUNCTION undolog.unfinished_sessions(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (session_id uuid, state text)
LANGUAGE sql
STABLE
AS $$
    SELECT s.session_id, s.state
    FROM undolog.undolog_sessions AS s
    WHERE undolog.session_unfinished(s.state, s.resolved_at)
      AND EXISTS (
          SELECT FROM undolog.undolog_effect_log AS e
          WHERE e.session_id = s.session_id
            AND e.executed_at >= p_from AND e.executed_at < p_to
      )
    ORDER BY s.session_id
$$;

REVOKE ALL ON FUNCTION undolog.unfinished_sessions(timestamptz, timestamptz) FROM public;
