-- BEFORE INSERT on undolog_operator_actions, FOR EACH ROW: links the row into its session's
-- history chain (undolog.history_chain, sql/functions/history_chain.sql).
CREATE OR REPLACE TRIGGER undolog_operator_actions_chain
BEFORE INSERT ON undolog.undolog_operator_actions
FOR EACH ROW EXECUTE FUNCTION undolog.history_chain('operator_actions');
