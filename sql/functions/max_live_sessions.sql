-- undolog.max_live_sessions: how many unfinished sessions one login may have at once,
-- from the database's setting undolog.max_live_sessions
-- (ALTER DATABASE d SET undolog.max_live_sessions = 200000); 100,000 when unset.
-- Unfinished: active, failed and compensating (the worker's still to do), awaiting
-- approval (a person's), and halted until an operator resolves it (abandon_session): a
-- halted session waits for a person too, and keeps its months from retention as the
-- others do (undolog.unfinished_sessions); a login whose compensations halt must not go
-- on opening sessions no one looks at. Completed and compensated sessions do not count.
-- Every session whose lease runs out is failed by the worker's sweep before any walk,
-- for every login: without a bound, one agent login beginning 1-second-lease sessions
-- faster than the sweep fails them (5,500 a second against 1,700) kept every worker's
-- pass from reaching any walk. 100,000 is ten times the most an honest use was seen to
-- hold (the benches' 10,000 live sessions of one login). Only the database-wide value
-- counts (undolog.database_setting): this runs inside the agent's begin_session, and its
-- own SET must not lift its bound. A value that is not an integer from 1 to 10,000,000
-- raises UL008 rather than being ignored (undolog.integer_setting_value): begin_session
-- then writes nothing.
-- PL/pgSQL, not SQL, as undolog.database_setting: every begin_session calls it, and a
-- SQL function with a SET clause is never inlined and is planned again in every
-- transaction (docs/performance-log.md, 2026-12-06).
CREATE OR REPLACE FUNCTION undolog.max_live_sessions()
RETURNS integer
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RETURN undolog.database_setting_integer('undolog.max_live_sessions', 100000, 1, 10000000);
END
$$;

REVOKE ALL ON FUNCTION undolog.max_live_sessions() FROM public;
