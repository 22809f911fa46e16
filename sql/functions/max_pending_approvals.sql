-- undolog.max_pending_approvals: how many approval requests the sessions of one login may
-- have pending at once, from the database's setting undolog.max_pending_approvals
-- (ALTER DATABASE d SET undolog.max_pending_approvals = 500); 100 when unset.
-- Every request is shown to the approvers and announced on every notification channel:
-- without a bound, one careless or hostile agent login could bury the people who decide
-- under requests. Only the database-wide value counts (undolog.database_setting): this
-- runs inside the agent's intercept, and its own SET must not lift its bound.
-- A value that is not an integer from 1 to 1,000,000 raises UL008 rather than being
-- ignored (undolog.integer_setting_value): intercept then writes nothing.
-- PL/pgSQL, not SQL, as undolog.database_setting: a SQL function with a SET clause is
-- never inlined and is planned again in every transaction that calls it.
CREATE OR REPLACE FUNCTION undolog.max_pending_approvals()
RETURNS integer
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
BEGIN
    RETURN undolog.database_setting_integer('undolog.max_pending_approvals', 100, 1, 1000000);
END
$$;

REVOKE ALL ON FUNCTION undolog.max_pending_approvals() FROM public;
