-- undolog.edit_changes: what an approver's edit changed, for a page that shows it: the
-- top-level arguments whose value differs between the requested args and the approved
-- ones (changed, added or dropped), at most p_most of them by name, each name and value
-- (compact JSON text, NULL where absent) cut at p_cut characters and then marked '…', so
-- that a changed value shows even where it falls past the cut of the whole args; and
-- total, how many there are in all. No changes (NULL) and a total of 0 when nothing was
-- approved instead (p_approved NULL). Pure: it reads nothing but its arguments, so a
-- caller shows only what it could already read (the dashboard's session page and Past
-- decisions). SECURITY DEFINER only as every function a role may call is (pgtap
-- 70_privileges): it reads nothing.
CREATE OR REPLACE FUNCTION undolog.edit_changes(
    p_requested jsonb, p_approved jsonb, p_cut integer, p_most integer
)
RETURNS TABLE (changes jsonb, total bigint)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'name', pg_catalog.left(c.name, p_cut)
                   || CASE WHEN pg_catalog.length(c.name) > p_cut THEN '…' ELSE '' END,
               'before', pg_catalog.left(c.before, p_cut)
                   || CASE WHEN pg_catalog.length(c.before) > p_cut THEN '…' ELSE '' END,
               'after', pg_catalog.left(c.after, p_cut)
                   || CASE WHEN pg_catalog.length(c.after) > p_cut THEN '…' ELSE '' END
           ) ORDER BY c.name) FILTER (WHERE c.n <= p_most),
           pg_catalog.count(*)
    FROM (
        SELECT k.name, (p_requested -> k.name)::text AS before,
               (p_approved -> k.name)::text AS after,
               pg_catalog.row_number() OVER (ORDER BY k.name) AS n
        FROM (
            SELECT pg_catalog.jsonb_object_keys(
                       CASE WHEN pg_catalog.jsonb_typeof(p_requested) = 'object'
                                 AND p_approved IS NOT NULL
                            THEN p_requested ELSE '{}' END)
            UNION
            SELECT pg_catalog.jsonb_object_keys(
                       CASE WHEN pg_catalog.jsonb_typeof(p_approved) = 'object'
                            THEN p_approved ELSE '{}' END)
        ) AS k (name)
        WHERE (p_requested -> k.name) IS DISTINCT FROM (p_approved -> k.name)
    ) AS c
    WHERE p_approved IS NOT NULL
$$;

REVOKE ALL ON FUNCTION undolog.edit_changes(jsonb, jsonb, integer, integer) FROM public;
