-- undolog.is_blank: true when p_text is NULL or holds nothing but white space and
-- invisible format characters, in any script: the one definition of "blank" for every
-- name, operator, reason and decided_by the engine requires. PostgreSQL's \s (and btrim)
-- know ASCII white space only in the C locale, so U+00A0 (no-break space), U+200B (zero
-- width space) and the like would pass as a name a person cannot see. The classes are
-- Unicode's White_Space and the format characters (Cf) that render as nothing.
-- python/undolog/blank.py holds the same class for checks made before the journal is
-- asked; tests/binding/test_blank.py compares the two over every character.
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
