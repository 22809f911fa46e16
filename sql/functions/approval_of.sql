-- undolog.approval_of: the approval request of an IRREVERSIBLE effect (NULL if none).
CREATE OR REPLACE FUNCTION undolog.approval_of(p_session_id uuid, p_effect_id uuid)
RETURNS uuid
LANGUAGE sql
STABLE
SET search_path = undolog, pg_temp
AS $$
    SELECT a.approval_id
    FROM undolog.undolog_approval_requests AS a
    WHERE a.effect_id = p_effect_id AND a.session_id = p_session_id
$$;

REVOKE ALL ON FUNCTION undolog.approval_of(uuid, uuid) FROM public;
