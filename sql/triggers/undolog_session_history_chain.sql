-- BEFORE INSERT on undolog_session_history, FOR EACH ROW: links the row into its session's
-- history chain (undolog.history_chain, sql/functions/history_chain.sql).
CREATE OR REPLACE TRIGGER undolog_session_history_chain
BEFORE INSERT ON undolog.undolog_session_history
FOR EACH ROW EXECUTE FUNCTION undolog.history_chain('session_history');
