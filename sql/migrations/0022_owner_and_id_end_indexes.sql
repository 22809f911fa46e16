-- 0022_owner_and_id_end_indexes: an agent's reads of its own sessions, and an id given
-- by its end, read an index instead of a whole table (measured at 101,100 sessions and
-- requests: docs/performance-log.md, 2026-12-06).

-- An agent's sessions: its read policy (sql/policies/undolog_sessions.sql) is
-- owner_role = session_user, and the policies of the session's rows look its sessions
-- up the same way. session_user is a name, whose collation is "C": the comparison is
-- made in "C", so only an index in "C" serves it (one in the column's collation is never
-- used, whatever the database's collation). Without it an agent's sessions list read
-- the whole sessions table for its page.
CREATE INDEX undolog_sessions_owner_idx
ON undolog.undolog_sessions ((owner_role COLLATE "C"));

-- An id given by its end (`undolog sessions show …9f3a01bc`, undolog.ids.short_id): the
-- hex digits reversed, so that an end is a prefix (python/undolog/queries.sql,
-- *_ids_ending). text_pattern_ops: a LIKE prefix uses it in any collation. A person's
-- lookup is one index range; an agent's cannot use it under its read policy (the match
-- is not leakproof, so it is applied after the policy) and starts from its own sessions
-- instead, through undolog_sessions_owner_idx.
CREATE INDEX undolog_sessions_id_end_idx
ON undolog.undolog_sessions (reverse(replace(session_id::text, '-', '')) text_pattern_ops);

CREATE INDEX undolog_approval_requests_id_end_idx
ON undolog.undolog_approval_requests (
    reverse(replace(approval_id::text, '-', '')) text_pattern_ops
);

CREATE INDEX undolog_notification_deliveries_id_end_idx
ON undolog.undolog_notification_deliveries (
    reverse(replace(delivery_id::text, '-', '')) text_pattern_ops
);

-- The planner takes the reversed ids' indexes only once it has their expressions'
-- statistics, which ANALYZE gathers (autovacuum analyzes a table only after a tenth of
-- its rows changed): without them it kept reading a whole table for an id's end.
-- ANALYZE samples at most 30,000 rows of a table, and blocks no reader or writer.
ANALYZE undolog.undolog_sessions;
ANALYZE undolog.undolog_approval_requests;
ANALYZE undolog.undolog_notification_deliveries;
