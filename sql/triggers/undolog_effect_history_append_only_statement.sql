-- undolog_effect_history refuses UPDATE and DELETE through the parent once per
-- statement, as every history table does: an UPDATE or DELETE that would touch no row
-- is refused all the same (the row trigger, undolog_effect_history_append_only, never
-- fires for it). Draining the default partition deletes from the partition itself, not
-- through the parent, so this trigger does not see it.
CREATE OR REPLACE TRIGGER undolog_effect_history_append_only_statement
BEFORE UPDATE OR DELETE ON undolog.undolog_effect_history
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
