-- Read access to the saga's own records (0002): every undo-entry change
-- (undolog_undo_history) and every operator decision (undolog_operator_actions). Approver
-- and operator read them to understand a halted session; agents do not. Row-level
-- security is enabled like on every table a role can read (staff see every row), so a
-- later grant to the agent role would show it nothing until a policy says what.
ALTER TABLE undolog.undolog_undo_history ENABLE ROW LEVEL SECURITY;
ALTER TABLE undolog.undolog_operator_actions ENABLE ROW LEVEL SECURITY;

CREATE POLICY undolog_staff_reads_all ON undolog.undolog_undo_history
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);

CREATE POLICY undolog_staff_reads_all ON undolog.undolog_operator_actions
FOR SELECT TO undolog_approver, undolog_operator
USING (TRUE);

GRANT SELECT ON undolog.undolog_undo_history TO undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_operator_actions TO undolog_approver, undolog_operator;
