-- undolog_operator_actions is append-only: every UPDATE and DELETE is refused
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_operator_actions_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_operator_actions
FOR EACH ROW EXECUTE FUNCTION undolog.forbid_change();
