-- 0025_sweep_oldest_first: a worker's pass fails a bounded number of expired leases, the
-- oldest first, then walks, however fast an agent login begins sessions that expire.
-- undolog.recover takes p_limit (at most this many expired leases failed, NULL for all of
-- them, as before): the signature without it goes; its source, applied again in the same
-- migrate, creates the new one (a plain `SELECT * FROM undolog.recover()` still calls it,
-- with the default NULL), and grants.sql grants it again.
DROP FUNCTION IF EXISTS undolog.recover();

-- undolog.fail_expired_sessions takes the active sessions whose lease ran out in
-- (lease_expires_at, session_id) order, a range of this index with no sort; on the index
-- of lease_expires_at alone every call sorted every expired lease (EXPLAIN: Sort over
-- the index scan) before failing its first, the whole flood each batch of 50.
-- Built under another name first: the build holds the table's SHARE lock (writes wait,
-- reads go on); only then is the old index dropped, whose ACCESS EXCLUSIVE lock (reads
-- wait too) is then held for the rest of migrate alone, not for the build.
CREATE INDEX undolog_sessions_lease_next_idx
ON undolog.undolog_sessions (lease_expires_at, session_id) WHERE state = 'active';
DROP INDEX undolog.undolog_sessions_lease_idx;
ALTER INDEX undolog.undolog_sessions_lease_next_idx RENAME TO undolog_sessions_lease_idx;
