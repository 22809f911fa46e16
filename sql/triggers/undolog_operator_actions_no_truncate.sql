-- TRUNCATE on undolog_operator_actions is refused (row triggers do not see it)
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_operator_actions_no_truncate
BEFORE TRUNCATE ON undolog.undolog_operator_actions
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
