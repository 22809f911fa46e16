-- undolog.chain_effect_history: BEFORE INSERT on undolog_effect_history, FOR EACH ROW.
-- Links the row into its session's history chain (undolog.chain_link over its canonical
-- record) and stores the link in the row, whatever wrote it: what a caller put in the
-- chain columns is replaced. Because it is a trigger, no code path can write an unlinked
-- row. This is the hot path (a new call writes two of these rows): the head's UPDATE is
-- chain_link's own, inline, which saves a function call and a query per row (about 7 of
-- the 35 µs a row's link costs, bench/bench_chain.py); chain_link is only called for a
-- session that has no head yet.
CREATE OR REPLACE FUNCTION undolog.chain_effect_history()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_canonical text := undolog.chain_record_effect_history(
        NEW.session_id, NEW.effect_id, NEW.executed_at, NEW.history_id, NEW.event,
        NEW.from_state, NEW.to_state, NEW.at, NEW.actor, NEW.detail);
BEGIN
    UPDATE undolog.undolog_chain_heads AS h
    SET seq = h.seq + 1, prev = h.head, head = undolog.chain_hash(h.head, v_canonical)
    WHERE h.session_id = NEW.session_id
    RETURNING h.seq, h.prev, h.head INTO NEW.chain_seq, NEW.chain_prev, NEW.chain_hash;
    IF NOT FOUND THEN
        SELECT l.seq, l.prev, l.hash INTO NEW.chain_seq, NEW.chain_prev, NEW.chain_hash
        FROM undolog.chain_link(NEW.session_id, v_canonical) AS l;
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.chain_effect_history() FROM public;
