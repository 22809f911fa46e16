-- BEFORE INSERT on undolog_effect_log, FOR EACH ROW: undolog.effect_log_guard() (see
-- sql/functions/effect_log_guard.sql), for every insert but the one intercept makes for
-- a new COMPENSABLE call (executing, its events to come in the row, nothing recorded or
-- linked yet): for that one the guard has nothing to do (the call is linked at its first
-- change of state), and this WHEN spares every journaled call a PL/pgSQL trigger. Any
-- other value in those columns fires the guard, which refuses a wrong starting state and
-- clears what an insert cannot have recorded yet. Only the engine's owner inserts
-- effects (grants.sql; pgtap/70_privileges.sql), through intercept.
CREATE OR REPLACE TRIGGER undolog_effect_log_guard_insert
BEFORE INSERT ON undolog.undolog_effect_log
FOR EACH ROW
WHEN (
    new.tier IS DISTINCT FROM 'compensable'
    OR new.state IS DISTINCT FROM 'executing'
    OR new.events_in_row IS NOT TRUE
    OR new.chain_seq IS NOT NULL
    OR new.commit_seq IS NOT NULL
    OR new.committed_at IS NOT NULL
)
EXECUTE FUNCTION undolog.effect_log_guard();
