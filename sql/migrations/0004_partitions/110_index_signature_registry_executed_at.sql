-- Retention deletes a dropped month's registry rows by range of executed_at: without
-- this index each drop would scan the whole registry (years of calls). executed_at only
-- grows, so intercept's insert always lands on the rightmost leaf: cheap.
-- IF NOT EXISTS (here and in the other 0004 indexes): before upgrading a large live
-- journal, a DBA can build them first with CREATE INDEX CONCURRENTLY under these names, so
-- that the migration does not hold intercepts behind an index build.
CREATE INDEX IF NOT EXISTS undolog_signature_registry_executed_at_idx
ON undolog.undolog_signature_registry (executed_at);
