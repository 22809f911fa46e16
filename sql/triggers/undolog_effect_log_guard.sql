-- BEFORE INSERT OR UPDATE on undolog_effect_log, FOR EACH ROW:
-- undolog.effect_log_guard() (see sql/functions/effect_log_guard.sql).
CREATE OR REPLACE TRIGGER undolog_effect_log_guard
BEFORE INSERT OR UPDATE ON undolog.undolog_effect_log
FOR EACH ROW EXECUTE FUNCTION undolog.effect_log_guard();
