-- undolog.chain_approval_requests: BEFORE INSERT OR UPDATE on undolog_approval_requests,
-- FOR EACH ROW, after its guard (triggers fire in name order). A request is linked into
-- its session's history chain when it is made (chain_*) and again when it is decided
-- (decision_*), by undolog.chain_link over the canonical record of each; what a caller
-- put in those columns is replaced (an UPDATE that changes them is refused by the
-- guard, which fires first).
CREATE OR REPLACE FUNCTION undolog.chain_approval_requests()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT l.seq, l.prev, l.hash INTO NEW.chain_seq, NEW.chain_prev, NEW.chain_hash
        FROM undolog.chain_link(NEW.session_id,
                                undolog.chain_record_approval_request(
                                    NEW.session_id, NEW.approval_id, NEW.effect_id,
                                    NEW.executed_at, NEW.requested_at, NEW.expires_at)) AS l;
        NEW.decision_seq := NULL;
        NEW.decision_prev := NULL;
        NEW.decision_hash := NULL;
    ELSIF OLD.state = 'pending' AND NEW.state <> 'pending' THEN
        SELECT l.seq, l.prev, l.hash INTO NEW.decision_seq, NEW.decision_prev, NEW.decision_hash
        FROM undolog.chain_link(NEW.session_id,
                                undolog.chain_record_approval_decision(
                                    NEW.session_id, NEW.approval_id, NEW.state,
                                    NEW.decided_at, NEW.decided_by, NEW.reason,
                                    NEW.decided_role)) AS l;
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.chain_approval_requests() FROM public;
