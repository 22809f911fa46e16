-- undolog_effect_history is append-only: every UPDATE and DELETE is refused
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_effect_history_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_effect_history
FOR EACH ROW EXECUTE FUNCTION undolog.forbid_change();
