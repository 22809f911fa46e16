-- Read access to undolog.undolog_chain_heads: the last link of each session's history
-- chain. An agent reads its own sessions' heads (see undolog_sessions.sql), approver and
-- operator every one. Only the owner writes, through the chain trigger.
-- DROP IF EXISTS then CREATE (CREATE POLICY has no OR REPLACE), so migrate can apply
-- the file again when it changes; RLS itself is enabled with the table, in its migration.
DROP POLICY IF EXISTS undolog_agent_reads_own ON undolog.undolog_chain_heads;
CREATE POLICY undolog_agent_reads_own ON undolog.undolog_chain_heads
FOR SELECT TO undolog_agent
USING (EXISTS (
    SELECT FROM undolog.undolog_sessions AS s
    WHERE s.session_id = undolog_chain_heads.session_id AND s.owner_role = session_user
));

DROP POLICY IF EXISTS undolog_staff_reads_all ON undolog.undolog_chain_heads;
CREATE POLICY undolog_staff_reads_all ON undolog.undolog_chain_heads
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);
