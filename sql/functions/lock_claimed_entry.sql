-- undolog.lock_claimed_entry: the in-flight undo entry a walker reports on (complete or
-- fail), locked as lock_undo_entry does. UL012 unknown id; UL001 when the entry is not in
-- flight (p_to names the transition refused, for the message) or when p_attempt is not
-- the entry's current attempt (the claim was handed out again since: a stale report).
CREATE OR REPLACE FUNCTION undolog.lock_claimed_entry(
    p_undo_id uuid, p_attempt integer, p_to text
)
RETURNS undolog.undolog_undo_stack
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_entry undolog.undolog_undo_stack := undolog.lock_undo_entry(p_undo_id);
BEGIN
    IF v_entry.state <> 'compensating' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('invalid undo entry transition %s -> %s',
                                        v_entry.state, p_to),
            DETAIL = pg_catalog.format('undo entry %s is %s, not in flight', p_undo_id,
                                       v_entry.state),
            HINT = 'Only a claimed entry takes a report: claim it again '
                   '(undolog.claim_compensation); undolog sessions show ID gives its state.';
    END IF;
    IF p_attempt IS DISTINCT FROM NULL AND p_attempt <> v_entry.attempts THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('stale claim: attempt %s of undo entry %s was '
                                        'superseded by attempt %s', p_attempt, p_undo_id,
                                        v_entry.attempts),
            HINT = 'Another walker claimed the entry after this one''s claim expired: drop this '
                   'report; the newer attempt reports instead.';
    END IF;
    RETURN v_entry;
END
$$;

REVOKE ALL ON FUNCTION undolog.lock_claimed_entry(uuid, integer, text) FROM public;
