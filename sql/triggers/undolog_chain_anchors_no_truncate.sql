-- TRUNCATE on undolog_chain_anchors is refused (row triggers do not see it)
-- (undolog.forbid_change, sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_chain_anchors_no_truncate
BEFORE TRUNCATE ON undolog.undolog_chain_anchors
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
