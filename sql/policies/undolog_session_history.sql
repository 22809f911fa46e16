-- Read access to undolog.undolog_session_history: its journal of session states.
-- An agent reads the rows of its own sessions (see undolog_sessions.sql; the
-- sessions subquery is itself filtered to the agent's sessions), approver and operator
-- read every row. Only the owner writes, through the SECURITY DEFINER functions.
-- DROP IF EXISTS then CREATE (CREATE POLICY has no OR REPLACE), so migrate can apply
-- the file again when it changes; RLS itself is enabled with the table, in its migration.
DROP POLICY IF EXISTS undolog_agent_reads_own ON undolog.undolog_session_history;
CREATE POLICY undolog_agent_reads_own ON undolog.undolog_session_history
FOR SELECT TO undolog_agent
USING (EXISTS (
    SELECT FROM undolog.undolog_sessions AS s
    WHERE s.session_id = undolog_session_history.session_id AND s.owner_role = session_user
));

DROP POLICY IF EXISTS undolog_staff_reads_all ON undolog.undolog_session_history;
CREATE POLICY undolog_staff_reads_all ON undolog.undolog_session_history
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);
