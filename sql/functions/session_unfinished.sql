-- undolog.session_unfinished: whether a session in p_state, resolved at p_resolved_at,
-- is unfinished: every state but completed and compensated, and a halted session until
-- an operator resolves it (abandon_session sets resolved_at: nothing will ever move it
-- again). An unfinished session holds its months against retention
-- (undolog.unfinished_sessions), counts against its login's bound
-- (undolog.max_live_sessions, in begin_session) and is counted live
-- (undolog.metrics_sessions): the one definition they all read.
-- Inlined by the planner into its callers' WHERE (a SQL function, IMMUTABLE, not
-- SECURITY DEFINER, SET nothing, not STRICT, each argument read once), where it becomes
-- the very expression of the partial indexes over the unfinished sessions,
-- undolog_sessions_unfinished_idx (0001) and undolog_sessions_owner_live_idx (0024),
-- whose predicates must keep their literal text: the planner uses a partial index only
-- for a query whose WHERE implies its predicate, so this body and those predicates must
-- say the same thing (tests/engine/test_unfinished_predicate.py checks that they do, and
-- that the callers still read the indexes). A state a later migration adds is unfinished
-- until it is listed here, with new indexes: refusing to drop is the safe mistake.
-- Readers of metrics_sessions need EXECUTE (a view's functions run as its reader); it
-- reads nothing (pgtap/70_privileges.sql).
CREATE OR REPLACE FUNCTION undolog.session_unfinished(p_state text, p_resolved_at timestamptz)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT p_state NOT IN ('completed', 'compensated') AND p_resolved_at IS NULL
$$;

REVOKE ALL ON FUNCTION undolog.session_unfinished(text, timestamptz) FROM public;
