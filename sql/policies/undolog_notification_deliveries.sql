-- Read access to undolog.undolog_notification_deliveries: whether each approval request
-- was announced, through which channel, how many attempts, the last error.
-- An agent reads the rows of its own sessions (see undolog_sessions.sql), approver and
-- operator every row. Only the owner writes, through the SECURITY DEFINER functions.
-- DROP IF EXISTS then CREATE (CREATE POLICY has no OR REPLACE), so migrate can apply
-- the file again when it changes; RLS itself is enabled with the table, in its migration.
DROP POLICY IF EXISTS undolog_agent_reads_own ON undolog.undolog_notification_deliveries;
CREATE POLICY undolog_agent_reads_own ON undolog.undolog_notification_deliveries
FOR SELECT TO undolog_agent
USING (EXISTS (
    SELECT FROM undolog.undolog_sessions AS s
    WHERE
        s.session_id = undolog_notification_deliveries.session_id
        AND s.owner_role = session_user
));

DROP POLICY IF EXISTS undolog_staff_reads_all ON undolog.undolog_notification_deliveries;
CREATE POLICY undolog_staff_reads_all ON undolog.undolog_notification_deliveries
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);
