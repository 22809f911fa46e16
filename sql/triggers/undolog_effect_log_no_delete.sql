-- Every DELETE on undolog_effect_log is refused
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_effect_log_no_delete
BEFORE DELETE ON undolog.undolog_effect_log
FOR EACH ROW EXECUTE FUNCTION undolog.forbid_change();
