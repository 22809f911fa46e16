-- Read access to undolog.undolog_tools: an agent reads the registrations of its own login
-- (the tools its sessions may call), approver and operator every registration. Only the
-- owner writes, through register_tool and retire_tool (SECURITY DEFINER).
-- DROP IF EXISTS then CREATE (CREATE POLICY has no OR REPLACE), so migrate can apply
-- the file again when it changes; RLS itself is enabled with the table, in its migration.
DROP POLICY IF EXISTS undolog_agent_reads_own ON undolog.undolog_tools;
CREATE POLICY undolog_agent_reads_own ON undolog.undolog_tools
FOR SELECT TO undolog_agent
USING (owner_role = session_user);

DROP POLICY IF EXISTS undolog_staff_reads_all ON undolog.undolog_tools;
CREATE POLICY undolog_staff_reads_all ON undolog.undolog_tools
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);
