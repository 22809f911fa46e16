-- undolog.reject: a human refuses an IRREVERSIBLE call, by approval id, saying who and
-- why. The effect becomes rejected (terminal: intercept answers 'rejected' from then on)
-- and the session, awaiting_approval, goes to compensating for its undo walk. Answers the
-- state recorded: 'rejected', or 'expired' when the deadline had already passed (the
-- call is refused either way; the record says the human came too late). Errors, each
-- writing nothing: UL008 blank decided_by, UL013 unknown approval, UL014 already decided.
CREATE OR REPLACE FUNCTION undolog.reject(
    p_approval_id uuid, p_decided_by text, p_reason text DEFAULT NULL
)
RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT undolog.decide_approval(p_approval_id, 'rejected', p_decided_by, p_reason, NULL)
$$;

REVOKE ALL ON FUNCTION undolog.reject(uuid, text, text) FROM public;
