-- undolog_chain_anchors is append-only: every UPDATE and DELETE is refused, once per
-- statement like every history table's guard (undolog.forbid_change,
-- sql/functions/forbid_change.sql).
CREATE OR REPLACE TRIGGER undolog_chain_anchors_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_chain_anchors
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
