-- Proposal 1 (engine-side, measured by bench_intercept.py --engine-patch): generic plans for
-- the PL/pgSQL statements that address the partitioned effect log by its key.
--
-- PL/pgSQL keeps a plan per statement, but the plan cache re-plans a statement with a
-- custom plan on every call when the custom plan looks cheaper than the generic one. On a
-- partitioned table it always does: the custom plan prunes partitions at plan time, the
-- generic plan costs every partition. So finish_execution's UPDATE (commit, fail) and
-- intercept's replay SELECT ... FOR UPDATE and UPDATE are planned afresh on each call.
-- A generic plan prunes at run time instead ("Subplans Removed" in EXPLAIN).
ALTER FUNCTION undolog.finish_execution(uuid, text, jsonb, text)
SET plan_cache_mode = force_generic_plan;

ALTER FUNCTION undolog.intercept(uuid, integer, text, text, jsonb, text, jsonb)
SET plan_cache_mode = force_generic_plan;
