-- BEFORE INSERT on undolog_effect_history, FOR EACH ROW: links the row into its session's
-- history chain (undolog.chain_effect_history, sql/functions/chain_effect_history.sql).
CREATE OR REPLACE TRIGGER undolog_effect_history_chain
BEFORE INSERT ON undolog.undolog_effect_history
FOR EACH ROW EXECUTE FUNCTION undolog.chain_effect_history();
