-- undolog.max_pending_approvals: how many approval requests the sessions of one login may
-- have pending at once, from the database's setting undolog.max_pending_approvals
-- (ALTER DATABASE d SET undolog.max_pending_approvals = 500); 100 when unset.
-- Every request is shown to the approvers and announced on every notification channel:
-- without a bound, one careless or hostile agent login could bury the people who decide
-- under requests. Only the database-wide value counts (undolog.database_setting): this
-- runs inside the agent's intercept, and its own SET must not lift its bound.
-- A value that is not an integer from 1 to 1,000,000 raises UL008 rather than being
-- ignored, as undolog.approval_timeout does: intercept then writes nothing.
CREATE OR REPLACE FUNCTION undolog.max_pending_approvals()
RETURNS integer
LANGUAGE plpgsql
STABLE
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_setting text := pg_catalog.btrim(undolog.database_setting('undolog.max_pending_approvals'));
BEGIN
    IF v_setting IS NULL OR v_setting = '' THEN
        RETURN 100;
    END IF;
    -- At most 7 digits, so the cast cannot overflow.
    IF v_setting !~ '^[0-9]{1,7}$' OR v_setting::integer NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format(
                'undolog.max_pending_approvals must be an integer from 1 to 1000000, not %s',
                pg_catalog.quote_literal(v_setting)),
            HINT = 'e.g. ALTER DATABASE app SET undolog.max_pending_approvals = 500; '
                   'empty or unset means 100.';
    END IF;
    RETURN v_setting::integer;
END
$$;

REVOKE ALL ON FUNCTION undolog.max_pending_approvals() FROM public;
