-- undolog_undo_history is append-only: every UPDATE and DELETE is refused
-- (undolog.forbid_change, sql/functions/forbid_change.sql). Once per statement, like the
-- undo stack's no_delete guard: the statement itself is refused, even when it would
-- touch no row (a row trigger let `DELETE FROM undolog_undo_history` pass on an empty
-- table), and retention's bypassed DELETE costs one trigger call, not one per row.
CREATE OR REPLACE TRIGGER undolog_undo_history_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_undo_history
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
