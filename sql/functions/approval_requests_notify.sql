-- undolog.approval_requests_notify: AFTER INSERT OR UPDATE OF state on
-- undolog_approval_requests. Every new request and every decision is announced on the
-- channel 'undolog_approvals' with ids only (well under NOTIFY's 8000-byte limit):
--   {"approval_id": "...", "session_id": "...", "effect_id": "...", "state": "..."}
-- state is 'pending' for a new request (wakes approvers' dashboards) and the decision
-- ('approved', 'rejected', 'expired') otherwise (wakes the waiting agent). A trigger,
-- not a line in approve/reject, so that no path that decides can forget it.
-- PostgreSQL delivers it at commit, so nobody is woken by a decision that rolled back.
CREATE OR REPLACE FUNCTION undolog.approval_requests_notify()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_catalog.pg_notify(
            'undolog_approvals',
            pg_catalog.jsonb_build_object(
                'approval_id', NEW.approval_id,
                'session_id', NEW.session_id,
                'effect_id', NEW.effect_id,
                'state', NEW.state
            )::text
        );
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION undolog.approval_requests_notify() FROM public;
