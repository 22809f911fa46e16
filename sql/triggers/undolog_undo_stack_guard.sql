-- BEFORE UPDATE on undolog_undo_stack, FOR EACH ROW:
-- undolog.undo_stack_guard() (see sql/functions/undo_stack_guard.sql).
CREATE OR REPLACE TRIGGER undolog_undo_stack_guard
BEFORE UPDATE ON undolog.undolog_undo_stack
FOR EACH ROW EXECUTE FUNCTION undolog.undo_stack_guard();
