-- Read access to undolog.undolog_signature_registry: an internal index (signature ->
-- effect), readable by approver and operator for diagnosis, not by the agent, who reads
-- the same facts in the effect log. RLS is enabled like on every session table, so that
-- a later grant to the agent could not expose other sessions' signatures.
-- DROP IF EXISTS then CREATE (CREATE POLICY has no OR REPLACE), so migrate can apply
-- the file again when it changes; RLS itself is enabled with the table, in its migration.
DROP POLICY IF EXISTS undolog_staff_reads_all ON undolog.undolog_signature_registry;
CREATE POLICY undolog_staff_reads_all ON undolog.undolog_signature_registry
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);
