-- BEFORE INSERT on undolog_undo_history, FOR EACH ROW: links the row into its session's
-- history chain (undolog.chain_undo_history, sql/functions/chain_undo_history.sql).
CREATE OR REPLACE TRIGGER undolog_undo_history_chain
BEFORE INSERT ON undolog.undolog_undo_history
FOR EACH ROW EXECUTE FUNCTION undolog.chain_undo_history();
