-- Read access to undolog.undolog_effect_log: its journal of calls. Policies and grants
-- are on the partitioned parent, which is how everyone reads it; the month partitions
-- carry no grant at all, so a role cannot go around the policies by naming a partition.
-- An agent reads the rows of its own sessions (see undolog_sessions.sql; the
-- sessions subquery is itself filtered to the agent's sessions), approver and operator
-- read every row. Only the owner writes, through the SECURITY DEFINER functions.
-- DROP IF EXISTS then CREATE (CREATE POLICY has no OR REPLACE), so migrate can apply
-- the file again when it changes; RLS itself is enabled with the table, in its migration.
DROP POLICY IF EXISTS undolog_agent_reads_own ON undolog.undolog_effect_log;
CREATE POLICY undolog_agent_reads_own ON undolog.undolog_effect_log
FOR SELECT TO undolog_agent
USING (EXISTS (
    SELECT FROM undolog.undolog_sessions AS s
    WHERE s.session_id = undolog_effect_log.session_id AND s.owner_role = session_user
));

DROP POLICY IF EXISTS undolog_staff_reads_all ON undolog.undolog_effect_log;
CREATE POLICY undolog_staff_reads_all ON undolog.undolog_effect_log
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);
