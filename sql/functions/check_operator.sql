-- undolog.check_operator: the p_by of an operator function names the human who decided;
-- the audit trail is worthless without it. UL008 when empty or absurdly long.
CREATE OR REPLACE FUNCTION undolog.check_operator(p_by text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
AS $$
BEGIN
    IF undolog.is_blank(p_by) OR length(p_by) > 200 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'p_by must name the operator: non-empty text of at most 200 characters',
            HINT = 'Pass p_by: who acts (for example ''alice''), non-blank, at most 200 '
                   'characters.';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_operator(text) FROM public;
