-- BEFORE INSERT on undolog_operator_actions, FOR EACH ROW: links the row into its session's
-- history chain (undolog.chain_operator_actions, sql/functions/chain_operator_actions.sql).
CREATE OR REPLACE TRIGGER undolog_operator_actions_chain
BEFORE INSERT ON undolog.undolog_operator_actions
FOR EACH ROW EXECUTE FUNCTION undolog.chain_operator_actions();
