-- BEFORE INSERT on undolog_session_history, FOR EACH ROW: links the row into its session's
-- history chain (undolog.chain_session_history, sql/functions/chain_session_history.sql).
CREATE OR REPLACE TRIGGER undolog_session_history_chain
BEFORE INSERT ON undolog.undolog_session_history
FOR EACH ROW EXECUTE FUNCTION undolog.chain_session_history();
