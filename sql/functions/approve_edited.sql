-- undolog.approve_edited: a human allows an IRREVERSIBLE call with arguments of their own
-- instead of the requested ones, saying who and why. Everything undolog.approve does,
-- and: the effect keeps the requested args (the same call made again, same signature,
-- finds this approval), the request records p_args as approved_args, the effect's history
-- an 'args_edited' row; when the agent makes the call again, intercept answers 'execute'
-- naming this approval, and its body runs once, with p_args (undolog.approval_edit).
-- Answers 'approved'. Errors, each writing nothing: those of approve; UL008 args not a
-- JSON object; UL009 args over the payload limits; UL023 the request was already decided;
-- UL024 the args name other arguments than the call's. p_args equal to the requested
-- args approve the call as asked.
CREATE OR REPLACE FUNCTION undolog.approve_edited(
    p_approval_id uuid, p_decided_by text, p_args jsonb, p_reason text DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
BEGIN
    IF p_args IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'args must be a JSON object, not NULL',
            HINT = 'undolog.approve approves the call as asked.';
    END IF;
    RETURN undolog.decide_approval(p_approval_id, 'approved', p_decided_by, p_reason, p_args);
END
$$;

REVOKE ALL ON FUNCTION undolog.approve_edited(uuid, text, jsonb, text) FROM public;
