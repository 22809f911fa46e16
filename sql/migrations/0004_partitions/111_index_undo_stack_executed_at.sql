-- Retention deletes a dropped month's undo entries by range of executed_at.
CREATE INDEX IF NOT EXISTS undolog_undo_stack_executed_at_idx
ON undolog.undolog_undo_stack (executed_at);
