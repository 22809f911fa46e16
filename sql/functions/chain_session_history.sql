-- undolog.chain_session_history: BEFORE INSERT on undolog_session_history, FOR EACH ROW.
-- Links the row into its session's history chain (undolog.chain_link over its canonical
-- record) and stores the link in the row, whatever wrote it: what a caller put in the
-- chain columns is replaced. Because it is a trigger, no code path can write an unlinked
-- row.
CREATE OR REPLACE FUNCTION undolog.chain_session_history()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    SELECT l.seq, l.prev, l.hash INTO NEW.chain_seq, NEW.chain_prev, NEW.chain_hash
    FROM undolog.chain_link(
        NEW.session_id,
        undolog.chain_record_session_history(
            NEW.session_id, NEW.history_id, NEW.from_state, NEW.to_state, NEW.at, NEW.actor,
            NEW.detail)) AS l;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.chain_session_history() FROM public;
