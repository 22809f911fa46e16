-- undolog.history_chain: BEFORE INSERT on each history table (and BEFORE UPDATE on the
-- approval requests), FOR EACH ROW, with the table's name as its argument. Links the row
-- into its session's chain (undolog.chain_link over its canonical record) and stores the
-- link in the row, whatever wrote it: what a caller put in the chain columns is replaced.
-- An approval request is linked when it is made and again when it is decided.
CREATE OR REPLACE FUNCTION undolog.history_chain()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_canonical text;
    v_seq bigint;
    v_prev bytea;
    v_hash bytea;
BEGIN
    CASE TG_ARGV[0]
        WHEN 'effect_history' THEN
            v_canonical := undolog.chain_record_effect_history(
                NEW.session_id, NEW.effect_id, NEW.executed_at, NEW.history_id, NEW.event,
                NEW.from_state, NEW.to_state, NEW.at, NEW.actor, NEW.detail);
        WHEN 'session_history' THEN
            v_canonical := undolog.chain_record_session_history(
                NEW.session_id, NEW.history_id, NEW.from_state, NEW.to_state, NEW.at,
                NEW.actor, NEW.detail);
        WHEN 'undo_history' THEN
            v_canonical := undolog.chain_record_undo_history(
                NEW.session_id, NEW.history_id, NEW.undo_id, NEW.event, NEW.from_state,
                NEW.to_state, NEW.attempt, NEW.at, NEW.actor, NEW.detail);
        WHEN 'operator_actions' THEN
            v_canonical := undolog.chain_record_operator_action(
                NEW.session_id, NEW.action_id, NEW.action, NEW.undo_id, NEW.performed_by,
                NEW.reason, NEW.at, NEW.actor);
        WHEN 'approval_requests' THEN
            IF TG_OP = 'UPDATE' THEN
                -- Only the decision is a new link; the guard refuses every other change.
                IF OLD.state <> 'pending' OR NEW.state = 'pending' THEN
                    RETURN NEW;
                END IF;
                SELECT l.seq, l.prev, l.hash INTO v_seq, v_prev, v_hash
                FROM undolog.chain_link(NEW.session_id,
                                        undolog.chain_record_approval_decision(
                                            NEW.session_id, NEW.approval_id, NEW.state,
                                            NEW.decided_at, NEW.decided_by, NEW.reason,
                                            NEW.decided_role)) AS l;
                NEW.decision_seq := v_seq;
                NEW.decision_prev := v_prev;
                NEW.decision_hash := v_hash;
                RETURN NEW;
            END IF;
            NEW.decision_seq := NULL;
            NEW.decision_prev := NULL;
            NEW.decision_hash := NULL;
            v_canonical := undolog.chain_record_approval_request(
                NEW.session_id, NEW.approval_id, NEW.effect_id, NEW.executed_at,
                NEW.requested_at, NEW.expires_at);
    END CASE;
    SELECT l.seq, l.prev, l.hash INTO v_seq, v_prev, v_hash
    FROM undolog.chain_link(NEW.session_id, v_canonical) AS l;
    NEW.chain_seq := v_seq;
    NEW.chain_prev := v_prev;
    NEW.chain_hash := v_hash;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.history_chain() FROM public;
