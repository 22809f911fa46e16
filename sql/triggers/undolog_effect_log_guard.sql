-- BEFORE UPDATE on undolog_effect_log, FOR EACH ROW:
-- undolog.effect_log_guard() (see sql/functions/effect_log_guard.sql). Inserts are
-- guarded by undolog_effect_log_guard_insert.
CREATE OR REPLACE TRIGGER undolog_effect_log_guard
BEFORE UPDATE ON undolog.undolog_effect_log
FOR EACH ROW EXECUTE FUNCTION undolog.effect_log_guard();
