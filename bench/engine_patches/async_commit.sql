-- A proposal, not applied: commit() with synchronous_commit = off for its own
-- transaction. A commit lost in a crash leaves the effect executing, the very state of a
-- crash just before commit(), which the undo walk already handles (outcome unknown:
-- compensate). intercept stays synchronous: the undo entry must be durable before the
-- body runs. Caveat: a caller who runs commit() inside a transaction of their own makes
-- their other writes asynchronous too, so this would have to be opt-in.
-- Measure it: bench_intercept.py --engine-patch async=bench/engine_patches/async_commit.sql
ALTER FUNCTION undolog.commit(uuid, jsonb) SET synchronous_commit = off;
