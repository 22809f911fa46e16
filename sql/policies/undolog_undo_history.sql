-- Read access to undolog.undolog_undo_history: every undo-entry change (a saga record).
-- Approver and operator read it to understand a halted session; agents do not. Row-level
-- security is enabled like on every table a role can read (staff see every row), so a
-- later grant to the agent role would show it nothing until a policy says what.
-- DROP IF EXISTS then CREATE (CREATE POLICY has no OR REPLACE), so migrate can apply
-- the file again when it changes; RLS itself is enabled with the table, in its migration.
DROP POLICY IF EXISTS undolog_staff_reads_all ON undolog.undolog_undo_history;
CREATE POLICY undolog_staff_reads_all ON undolog.undolog_undo_history
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);
