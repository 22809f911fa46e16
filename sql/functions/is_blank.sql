-- undolog.is_blank: true when p_text is NULL or holds nothing but white space and
-- invisible format characters, in any script: the one definition of "blank" for every
-- name, operator, reason and decided_by the engine requires. PostgreSQL's \s (and btrim)
-- know ASCII white space only in the C locale, so U+00A0 (no-break space), U+200B (zero
-- width space) and the like would pass as a name a person cannot see. The classes are
-- Unicode's White_Space and the format characters (Cf) that render as nothing.
-- A check made before the journal is asked asks this function (the MCP proxy's
-- undolog__undo_last, of its reason): agents may call it. Not SECURITY DEFINER, nor SET
-- anything, unlike every other function a role may call (pgtap/70_privileges.sql says
-- why it may be): it reads nothing, and either would keep the planner from inlining it
-- into its callers' expressions (check_call's, which intercept passes each call through).
CREATE OR REPLACE FUNCTION undolog.is_blank(p_text text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT p_text IS NULL OR p_text !~ (
        '[^\t\n\v\f\r \u0085\u00a0\u00ad\u1680\u180e\u2000-\u200f\u2028-\u202f'
        || '\u205f-\u2064\u2066-\u206f\u3000\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f]'
    )
$$;

REVOKE ALL ON FUNCTION undolog.is_blank(text) FROM public;
