-- undolog.chain_link: append one record to its session's history chain and answer the
-- link (seq, prev, hash) the row stores. The head (undolog_chain_heads) is updated in
-- the caller's transaction: its row lock orders a session's concurrent writers until
-- they commit, and touches no other session's. The session's first record creates it.
CREATE OR REPLACE FUNCTION undolog.chain_link(p_session_id uuid, p_canonical text)
RETURNS TABLE (seq bigint, prev bytea, hash bytea)
LANGUAGE plpgsql
AS $$
BEGIN
    -- The head exists from the session's first row on: one UPDATE, whose RETURNING
    -- gives the old head too (the new prev).
    RETURN QUERY
    UPDATE undolog.undolog_chain_heads AS h
    SET seq = h.seq + 1, prev = h.head, head = undolog.chain_hash(h.head, p_canonical)
    WHERE h.session_id = p_session_id
    RETURNING h.seq, h.prev, h.head;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO undolog.undolog_chain_heads AS h (session_id, seq, prev, head)
    VALUES (p_session_id, 1, undolog.chain_genesis(),
            undolog.chain_hash(undolog.chain_genesis(), p_canonical))
    ON CONFLICT (session_id) DO UPDATE
    SET seq = h.seq + 1, prev = h.head, head = undolog.chain_hash(h.head, p_canonical)
    RETURNING h.seq, h.prev, h.head;
END
$$;

REVOKE ALL ON FUNCTION undolog.chain_link(uuid, text) FROM public;
