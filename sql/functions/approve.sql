-- undolog.approve: a human allows an IRREVERSIBLE call, by approval id, saying who and
-- why. The effect becomes approved and the session active again (once none of its
-- requests is pending); making the same call again then executes it, once. Answers
-- 'approved'. Errors, each writing nothing: UL008 blank decided_by, UL013 unknown
-- approval, UL014 already decided, UL015 deadline passed, UL010 the session was sent to
-- its undo walk meanwhile. Waiters are woken on channel 'undolog_approvals' at commit.
CREATE OR REPLACE FUNCTION undolog.approve(
    p_approval_id uuid, p_decided_by text, p_reason text DEFAULT NULL
)
RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT undolog.decide_approval(p_approval_id, 'approved', p_decided_by, p_reason, NULL)
$$;

REVOKE ALL ON FUNCTION undolog.approve(uuid, text, text) FROM public;
