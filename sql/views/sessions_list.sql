-- undolog.sessions_list: one row per session, without aggregates, so that a filter or a
-- keyset on it reaches the sessions table's indexes (sessions_overview groups every
-- session's calls first, which no page of fifty can afford over a million sessions).
-- security_invoker: the reader's row-level security applies (an agent sees its own).
CREATE OR REPLACE VIEW undolog.sessions_list
WITH (security_invoker = TRUE) AS
SELECT
    s.session_id,
    s.agent,
    s.owner_role,
    s.state,
    s.created_at,
    s.updated_at,
    s.lease_expires_at,
    s.error,
    s.metadata,
    s.halt_undo_id,
    s.resolved_by,
    s.resolved_at,
    s.resolution,
    s.undo_floor,
    s.undo_to
FROM undolog.undolog_sessions AS s;

COMMENT ON VIEW undolog.sessions_list IS
'Sessions as the reader may see them (RLS), unaggregated: page with (created_at, session_id).';

REVOKE ALL ON undolog.sessions_list FROM public;
