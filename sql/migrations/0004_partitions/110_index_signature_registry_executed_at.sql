-- Retention deletes a dropped month's registry rows by range of executed_at: without
-- this index each drop would scan the whole registry (years of calls). executed_at only
-- grows, so intercept's insert always lands on the rightmost leaf: cheap.
CREATE INDEX undolog_signature_registry_executed_at_idx
ON undolog.undolog_signature_registry (executed_at);
