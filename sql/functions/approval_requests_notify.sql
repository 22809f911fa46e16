-- undolog.approval_requests_notify: AFTER INSERT OR UPDATE OF state on
-- undolog_approval_requests. Every new request and every decision wakes the listeners of
-- channel 'undolog_approvals' with an EMPTY payload. Any login may LISTEN, and a payload
-- would tell every agent which sessions, effects and approvals other agents have (issue
-- 10): the notification says only "something changed", and each listener re-reads what
-- it may see (its own sessions through row-level security, or the approval views).
-- A trigger, not a line in approve/reject, so that no path that decides can forget it.
-- PostgreSQL delivers it at commit (identical notifications of one transaction once), so
-- nobody is woken by a decision that rolled back. Not when the cluster's notification
-- queue is nearly full (undolog.wake_listeners): the request and the decision must not
-- fail for it, and every waiter also polls.
CREATE OR REPLACE FUNCTION undolog.approval_requests_notify()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM undolog.wake_listeners('undolog_approvals');
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION undolog.approval_requests_notify() FROM public;
