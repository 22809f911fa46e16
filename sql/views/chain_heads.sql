-- undolog.chain_heads: the last link of each session's history chain (its sequence number,
-- the previous link's hash and its own), as `undolog export` puts it in an export's
-- header. security_invoker: the heads' row-level security applies (an agent reads its own
-- sessions' heads).
CREATE OR REPLACE VIEW undolog.chain_heads
WITH (security_invoker = TRUE) AS
SELECT
    h.session_id,
    h.seq,
    h.prev,
    h.head
FROM undolog.undolog_chain_heads AS h;

COMMENT ON VIEW undolog.chain_heads IS
'The last link of each session''s history chain, filtered by the reader''s RLS.';

REVOKE ALL ON undolog.chain_heads FROM public;
