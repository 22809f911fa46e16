-- 0021_chain_events_records_optional: undolog.chain_events takes p_records (false: the
-- same rows without their canonical records, which cost most of the call), so that what
-- only counts the rows (`undolog verify`'s counts, assert_chain) no longer builds every
-- record a second time. The four-argument signature goes; its source applies the new one
-- in the same migrate (and grants.sql its grant). verify_chain and assert_chain, which
-- call it without p_records, get the default (true).
DROP FUNCTION IF EXISTS undolog.chain_events(uuid, timestamptz, uuid, uuid);
