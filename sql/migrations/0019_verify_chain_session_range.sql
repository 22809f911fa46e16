-- 0019_verify_chain_session_range: undolog.verify_chain, undolog.chain_events and
-- undolog.chain_impossible_rows take a range of session ids as well (p_after_session,
-- p_through_session), so that `undolog verify` checks every session range by range and
-- shows its progress. The two-argument signatures go; their sources apply the new ones
-- in the same migrate (and grants.sql their grants). assert_chain, which calls them with
-- two arguments, gets the new ones' defaults.
DROP FUNCTION IF EXISTS undolog.verify_chain(uuid, timestamptz);
DROP FUNCTION IF EXISTS undolog.chain_events(uuid, timestamptz);
DROP FUNCTION IF EXISTS undolog.chain_impossible_rows(uuid, timestamptz);
