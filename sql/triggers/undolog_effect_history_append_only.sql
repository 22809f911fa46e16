-- undolog_effect_history is append-only: every UPDATE and DELETE of a row is refused
-- (undolog.forbid_change, sql/functions/forbid_change.sql). A row trigger on the
-- partitioned parent is cloned onto every month partition and the default, so a
-- statement naming a partition directly is refused too; a statement trigger is not
-- cloned. The statement itself, through the parent, is refused by
-- undolog_effect_history_append_only_statement, even when it would touch no row.
CREATE OR REPLACE TRIGGER undolog_effect_history_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_effect_history
FOR EACH ROW EXECUTE FUNCTION undolog.forbid_change();
