-- Every DELETE on undolog_undo_stack is refused (undolog.forbid_change): an entry holds
-- its call's exactly-once key (session_id, call_signature), and a deleted one would let
-- the same call run again. Retention alone deletes a dropped month's entries, through
-- undolog.set_append_only_bypass. Once per statement: that bulk DELETE then costs one
-- trigger call, and an empty DELETE is refused as surely.
CREATE OR REPLACE TRIGGER undolog_undo_stack_no_delete
BEFORE DELETE ON undolog.undolog_undo_stack
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
