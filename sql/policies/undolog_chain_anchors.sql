-- Read access to undolog.undolog_chain_anchors: the anchors of every session's history
-- chain. Staff only (an anchor names every session that moved); only the owner writes,
-- through undolog.write_anchor.
-- DROP IF EXISTS then CREATE (CREATE POLICY has no OR REPLACE), so migrate can apply
-- the file again when it changes; RLS itself is enabled with the table, in its migration.
DROP POLICY IF EXISTS undolog_staff_reads_all ON undolog.undolog_chain_anchors;
CREATE POLICY undolog_staff_reads_all ON undolog.undolog_chain_anchors
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);
