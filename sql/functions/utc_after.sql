-- undolog.utc_after: p_at moved by p_span on the UTC clock, whatever the session's
-- TimeZone. timestamptz + interval adds a span's days and months on the session's wall
-- clock, and a login chooses its own TimeZone (SET TimeZone, a POSIX rule of its own such
-- as 'AAA-12BBB+12,341/0,342/0', a "summer time" of minus 24 hours on any day): its
-- '1 day' was then 48 hours. Deadlines another login keeps (an approval request's,
-- undolog.approval_timeout; a session's lease, renewed by an approver's decision or the
-- worker; a walker's claim and its retry's backoff; a notification delivery's lease) are
-- made with this instead: '1 day' is 24 hours, '1 month' a UTC month.
-- Every name qualified: it is inlined into its caller, whose search_path it parses with.
CREATE OR REPLACE FUNCTION undolog.utc_after(p_at timestamptz, p_span interval)
RETURNS timestamptz
LANGUAGE sql
IMMUTABLE
STRICT
PARALLEL SAFE
AS $$
    SELECT pg_catalog.timezone(
        'UTC', pg_catalog.timezone('UTC', p_at) OPERATOR(pg_catalog.+) p_span)
$$;

REVOKE ALL ON FUNCTION undolog.utc_after(timestamptz, interval) FROM public;
