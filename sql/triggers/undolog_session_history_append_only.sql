-- undolog_session_history is append-only: every UPDATE and DELETE is refused
-- (undolog.forbid_change, sql/functions/forbid_change.sql). Once per statement, like
-- every history table's guard: the statement itself is refused, even when it would touch
-- no row (a row trigger lets `DELETE FROM undolog_session_history` pass on an empty
-- table or with a WHERE that matches nothing).
CREATE OR REPLACE TRIGGER undolog_session_history_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_session_history
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
