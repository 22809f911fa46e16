-- undolog.chain_anchors: the anchors that chain the sessions' heads together (written by
-- maintenance and `undolog anchor write`), each with the text that was hashed, so that
-- an operator can export one to somewhere the database cannot rewrite and check it later.
-- security_invoker: approvers and operators only (the table's privileges).
CREATE OR REPLACE VIEW undolog.chain_anchors
WITH (security_invoker = TRUE) AS
SELECT
    a.anchor_id,
    a.written_at,
    a.heads,
    a.prev,
    a.canonical,
    a.anchor_hash
FROM undolog.undolog_chain_anchors AS a;

COMMENT ON VIEW undolog.chain_anchors IS
'The anchors of the history chains: the sessions'' heads, chained, with their hashed text.';

REVOKE ALL ON undolog.chain_anchors FROM public;
