-- TRUNCATE on undolog_signature_registry is refused (row triggers do not see it)
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_signature_registry_no_truncate
BEFORE TRUNCATE ON undolog.undolog_signature_registry
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
