-- TRUNCATE skips row triggers, so each append-only table also refuses it per statement.
-- A statement trigger on a partitioned table does not fire when a partition is truncated
-- directly; undolog.create_month_partitions adds the same trigger to each new month.
CREATE OR REPLACE TRIGGER undolog_effect_log_no_truncate
BEFORE TRUNCATE ON undolog.undolog_effect_log
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();
