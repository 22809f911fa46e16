-- The registry's append-only guard, once per statement instead of once per row (replaces
-- 0001's row trigger of the same name). A statement trigger refuses every UPDATE and
-- DELETE just as surely, before any row changes (even one that would match no row), and
-- retention's bypassed DELETE of a month of registry rows then costs one trigger call
-- instead of one PL/pgSQL call per row: 500 000 rows took 1.0 s with the row trigger and
-- 0.3 s with this one. The registry is a plain table, so no partition can escape a
-- statement trigger; TRUNCATE keeps its own (0001).
DROP TRIGGER undolog_signature_registry_append_only ON undolog.undolog_signature_registry;

CREATE TRIGGER undolog_signature_registry_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_signature_registry
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
