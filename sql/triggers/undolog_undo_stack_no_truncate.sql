-- TRUNCATE on undolog_undo_stack is refused (row triggers do not see it).
CREATE OR REPLACE TRIGGER undolog_undo_stack_no_truncate
BEFORE TRUNCATE ON undolog.undolog_undo_stack
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
