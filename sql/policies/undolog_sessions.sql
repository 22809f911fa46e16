-- Read access to undolog_sessions. Nobody but the owner writes to any table: every write
-- goes through a SECURITY DEFINER function, which runs as the owner. The owner is not
-- subject to row-level security (it is ENABLEd, never FORCEd), so those functions see
-- and change every row whoever calls them; RLS filters only what a role reads directly.
--   agent:             its own sessions (begun by its login: owner_role = session_user)
--   approver/operator: every session (they decide on and repair any of them)
-- DROP IF EXISTS then CREATE (CREATE POLICY has no OR REPLACE), so migrate can apply
-- the file again when it changes; RLS itself is enabled with the table, in its migration.
DROP POLICY IF EXISTS undolog_agent_reads_own ON undolog.undolog_sessions;
CREATE POLICY undolog_agent_reads_own ON undolog.undolog_sessions
FOR SELECT TO undolog_agent
USING (owner_role = session_user);

DROP POLICY IF EXISTS undolog_staff_reads_all ON undolog.undolog_sessions;
CREATE POLICY undolog_staff_reads_all ON undolog.undolog_sessions
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);
