-- 0024_owner_live_sessions_index: a login's unfinished sessions, for the bound on them
-- (undolog.max_live_sessions, checked by begin_session before a new session is written).
-- Unfinished as undolog_sessions_unfinished_idx says: every state but completed and
-- compensated, and a halted session until an operator resolves it (abandon_session).
-- Partial, so that a login's finished sessions, however many, are never read: the check
-- reads at most the bound's count of entries, and a login with a few live sessions a few.
-- In "C", as undolog_sessions_owner_idx (0022): the check compares with session_user, a
-- name, whose collation is "C"; an index in the column's collation would not serve it.
CREATE INDEX undolog_sessions_owner_live_idx
ON undolog.undolog_sessions ((owner_role COLLATE "C"))
WHERE state NOT IN ('completed', 'compensated') AND resolved_at IS NULL;

-- As in 0022: the planner weighs a new index by the table's statistics, which ANALYZE
-- refreshes now rather than once autovacuum gets to it (a tenth of the rows changed).
ANALYZE undolog.undolog_sessions;
