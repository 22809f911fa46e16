-- undolog.verify_chain: recompute the history chains (undolog.chain_events) of one
-- session or all, from p_since on, and answer every row that does not match, in chain
-- order (none: the history is as it was written). p_after_session and p_through_session
-- verify the sessions of a range of ids only (p_after_session < session_id <=
-- p_through_session; a NULL bound: none on that side), every check of a session (its
-- rows, links, head, anchored seqs and impossible rows) restricted to them: `undolog
-- verify` checks every session range by range, in id order, and the ranges' answers one
-- after the other are the whole run's. problem is one of
--   unchained  a row with no link: written with the chain trigger disabled
--   altered    its columns no longer hash to its stored hash (expected: the hash the row
--              has now, found: the stored one): a column was changed
--   link       its prev is not the previous row's hash: rows reordered, or a row
--              deleted and its successor's chain re-written
--   missing    its seq does not follow the previous row's: rows deleted (or
--              renumbered)
--   duplicate  two rows at the same seq
--   head       the session's head (undolog_chain_heads) is not its last row: rows
--              deleted at the end, or the head changed
--   anchored   an anchor recorded a head that the row at that seq no longer has
--   impossible it hashes right, but holds a value the engine never writes there, which
--              its canonical record writes as it writes the one the engine wrote (the
--              SQL NULL and the JSON null): undolog.chain_impossible_rows, whose rules
--              these are (expected: what the engine writes, found: what is there)
-- and, when every session is verified, the anchors' own chain (table undolog_chain_anchors:
-- altered, link, missing; session_id NULL), checked once: by the call whose range is open
-- at its top (p_through_session NULL), a whole run or a batched run's last range, whose
-- findings come last in the order as they do in a whole run's. From p_since on, a
-- session's first row is checked against its own stored prev (the rows before it are not
-- read; retention may have dropped them), and an anchored seq with no row is reported
-- unless it lies before that first row (or, for a session with no row from p_since on,
-- at or before its head).
-- Staff only (grants.sql), who read every history anyway: SECURITY DEFINER, as every
-- function a role calls.
CREATE OR REPLACE FUNCTION undolog.verify_chain(
    p_session_id uuid DEFAULT NULL,
    p_since timestamptz DEFAULT NULL,
    p_after_session uuid DEFAULT NULL,
    p_through_session uuid DEFAULT NULL
)
RETURNS TABLE (
    session_id uuid, seq bigint, table_name text, row_key text, problem text,
    expected text, found text
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
-- Planned for the arguments given, as chain_events: one session's head, or a range's, is
-- read by its key (a generic plan would scan every head for `p_session_id IS NULL OR
-- ...`), and the anchors' own chain is not read at all by a range closed at its top.
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    -- Whether the anchors' heads are read without a cast that can fail (below).
    v_safe boolean := false;
BEGIN
    LOOP
        BEGIN
            RETURN QUERY
            WITH e AS MATERIALIZED (
                SELECT * FROM undolog.chain_events(p_session_id, p_since, p_after_session,
                                                   p_through_session)
            ),
            w AS (
                SELECT e.*,
                       pg_catalog.lag(e.seq) OVER s AS before_seq,
                       pg_catalog.lag(e.hash) OVER s AS before_hash,
                       pg_catalog.row_number() OVER s AS n
                FROM e
                WHERE e.seq IS NOT NULL
                WINDOW s AS (PARTITION BY e.session_id ORDER BY e.seq, e.table_name, e.row_key)
            ),
            last AS (
                SELECT DISTINCT ON (w.session_id) w.session_id, w.seq, w.hash
                FROM w
                ORDER BY w.session_id, w.seq DESC
            ),
            heads AS (
                SELECT h.session_id, h.seq, h.head
                FROM undolog.undolog_chain_heads AS h
                WHERE (p_session_id IS NULL OR h.session_id = p_session_id)
                  AND (p_after_session IS NULL OR h.session_id > p_after_session)
                  AND (p_through_session IS NULL OR h.session_id <= p_through_session)
            ),
            anchors AS (
                SELECT a.*,
                       pg_catalog.lag(a.anchor_id) OVER s AS before_id,
                       pg_catalog.lag(a.anchor_hash) OVER s AS before_hash
                FROM undolog.undolog_chain_anchors AS a
                WINDOW s AS (ORDER BY a.anchor_id)
            ),
            -- Each head of each anchor: read with casts, or (v_safe) without a cast that
            -- can fail, a malformed part NULL (heads that are no object: none). A head
            -- with a part missing or malformed is reported as such (malformed); one whose
            -- key is no session id belongs to no range of sessions, so it is reported
            -- where the anchors' own findings are: by a run open at its top.
            anchored AS (
                SELECT h.anchor_id, h.session_id, h.seq, h.head, h.key, h.raw,
                       (h.session_id IS NULL OR h.seq IS NULL OR h.head IS NULL) AS malformed
                FROM (
                    SELECT a.anchor_id, x.key, x.value AS raw,
                           CASE WHEN NOT v_safe THEN x.key::uuid
                                WHEN x.key ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                                THEN x.key::uuid END AS session_id,
                           CASE WHEN NOT v_safe THEN (x.value ->> 0)::bigint
                                WHEN pg_catalog.jsonb_typeof(x.value -> 0) = 'number'
                                     AND (x.value ->> 0) ~ '^[0-9]{1,18}$'
                                THEN (x.value ->> 0)::bigint END AS seq,
                           CASE WHEN NOT v_safe THEN pg_catalog.decode(x.value ->> 1, 'hex')
                                WHEN pg_catalog.jsonb_typeof(x.value -> 1) = 'string'
                                     AND (x.value ->> 1) ~ '^([0-9a-f]{2})*$'
                                THEN pg_catalog.decode(x.value ->> 1, 'hex') END AS head
                    FROM undolog.undolog_chain_anchors AS a,
                         LATERAL pg_catalog.jsonb_each(
                             CASE WHEN NOT v_safe OR pg_catalog.jsonb_typeof(a.heads) = 'object'
                                  THEN a.heads ELSE '{}' END) AS x
                ) AS h
                WHERE (p_session_id IS NULL OR h.key = p_session_id::text)
                  AND CASE WHEN h.session_id IS NULL THEN p_through_session IS NULL
                           ELSE (p_after_session IS NULL OR h.session_id > p_after_session)
                                AND (p_through_session IS NULL
                                     OR h.session_id <= p_through_session)
                      END
            ),
            findings AS (
                SELECT e.session_id, e.seq, e.table_name, e.row_key, 'unchained' AS problem,
                       'a link of the chain' AS expected, 'no seq, prev or hash (chain_*, commit_* or decision_*)' AS found
                FROM e
                WHERE e.seq IS NULL OR e.prev IS NULL OR e.hash IS NULL
                UNION ALL
                SELECT w.session_id, w.seq, w.table_name, w.row_key, 'altered',
                       pg_catalog.encode(undolog.chain_hash(w.prev, w.canonical), 'hex'),
                       pg_catalog.encode(w.hash, 'hex')
                FROM w
                WHERE w.prev IS NOT NULL AND w.hash IS NOT NULL
                  AND w.hash <> undolog.chain_hash(w.prev, w.canonical)
                UNION ALL
                SELECT w.session_id, w.seq, w.table_name, w.row_key, 'duplicate',
                       'seq ' || (w.before_seq + 1), 'seq ' || w.seq
                FROM w
                WHERE w.seq = w.before_seq
                UNION ALL
                SELECT w.session_id, w.seq, w.table_name, w.row_key, 'missing',
                       'seq ' || coalesce(w.before_seq + 1, 1), 'seq ' || w.seq
                FROM w
                WHERE (w.n = 1 AND p_since IS NULL AND w.seq <> 1) OR w.seq > w.before_seq + 1
                UNION ALL
                SELECT w.session_id, w.seq, w.table_name, w.row_key, 'link',
                       pg_catalog.encode(coalesce(w.before_hash, undolog.chain_genesis()), 'hex'),
                       coalesce(pg_catalog.encode(w.prev, 'hex'), 'NULL')
                FROM w
                WHERE w.seq IS DISTINCT FROM w.before_seq
                  AND (w.n > 1 OR p_since IS NULL)
                  AND w.prev IS DISTINCT FROM coalesce(w.before_hash, undolog.chain_genesis())
                UNION ALL
                SELECT coalesce(h.session_id, l.session_id), coalesce(h.seq, l.seq),
                       'undolog_chain_heads', 'session_id=' || coalesce(h.session_id, l.session_id),
                       'head',
                       coalesce('seq ' || l.seq || ' ' || pg_catalog.encode(l.hash, 'hex'), 'no head'),
                       coalesce('seq ' || h.seq || ' ' || pg_catalog.encode(h.head, 'hex'), 'no head')
                FROM heads AS h
                FULL JOIN last AS l ON l.session_id = h.session_id
                WHERE (l.seq, l.hash) IS DISTINCT FROM (h.seq, h.head)
                  AND (l.session_id IS NOT NULL OR p_since IS NULL)
                UNION ALL
                SELECT a.session_id, a.seq, 'undolog_chain_anchors', 'anchor_id=' || a.anchor_id,
                       'anchored',
                       CASE WHEN a.malformed THEN 'a head: session id, [seq, hex hash]'
                            ELSE pg_catalog.encode(a.head, 'hex') END,
                       CASE WHEN a.malformed
                            THEN 'malformed: ' || pg_catalog.left(pg_catalog.to_jsonb(a.key)::text
                                                                 || ': ' || a.raw::text, 200)
                            ELSE coalesce(pg_catalog.encode(r.hash, 'hex'),
                                          'no row at seq ' || a.seq) END
                FROM anchored AS a
                LEFT JOIN w AS r ON r.session_id = a.session_id AND r.seq = a.seq
                LEFT JOIN w AS fw ON fw.session_id = a.session_id AND fw.n = 1
                LEFT JOIN heads AS h ON h.session_id = a.session_id
                WHERE a.malformed
                   OR (r.hash IS DISTINCT FROM a.head
                       -- From p_since on, the rows before the window are not read (retention
                       -- may have dropped them): an anchored seq with no row is excused below
                       -- the session's first row in the window only. At or above it, the row
                       -- was deleted. With no row in the window, up to the session's head
                       -- only: heads never go back, so an anchored seq past the head is a
                       -- deleted tail (no head at all: reported).
                       AND (r.session_id IS NOT NULL OR p_since IS NULL
                            OR a.seq >= coalesce(fw.seq, h.seq + 1, 0)))
                UNION ALL
                SELECT NULL::uuid, a.anchor_id, 'undolog_chain_anchors', 'anchor_id=' || a.anchor_id,
                       'altered',
                       pg_catalog.encode(undolog.chain_hash(
                           a.prev, undolog.anchor_record(a.anchor_id, a.written_at, a.heads)), 'hex'),
                       pg_catalog.encode(a.anchor_hash, 'hex')
                FROM anchors AS a
                WHERE p_session_id IS NULL AND p_through_session IS NULL
                  AND (a.canonical <> undolog.anchor_record(a.anchor_id, a.written_at, a.heads)
                       OR a.anchor_hash <> undolog.chain_hash(a.prev, a.canonical))
                UNION ALL
                SELECT NULL::uuid, a.anchor_id, 'undolog_chain_anchors', 'anchor_id=' || a.anchor_id,
                       CASE WHEN a.anchor_id <> coalesce(a.before_id + 1, 1) THEN 'missing' ELSE 'link' END,
                       pg_catalog.encode(coalesce(a.before_hash, undolog.chain_genesis()), 'hex'),
                       pg_catalog.encode(a.prev, 'hex')
                FROM anchors AS a
                WHERE p_session_id IS NULL AND p_through_session IS NULL
                  AND (a.prev <> coalesce(a.before_hash, undolog.chain_genesis())
                       OR a.anchor_id <> coalesce(a.before_id + 1, 1))
                UNION ALL
                SELECT i.session_id, i.seq, i.table_name, i.row_key, i.problem, i.expected, i.found
                FROM undolog.chain_impossible_rows(p_session_id, p_since, p_after_session,
                                                   p_through_session) AS i
            )
            SELECT f.session_id, f.seq, f.table_name, f.row_key, f.problem, f.expected, f.found
            FROM findings AS f
            ORDER BY f.session_id NULLS LAST, f.seq NULLS FIRST, f.table_name, f.row_key,
                     pg_catalog.array_position(
                         ARRAY['unchained', 'missing', 'duplicate', 'link', 'altered', 'impossible',
                               'head', 'anchored'],
                         f.problem);
            RETURN;
        -- Heads rewritten behind the triggers' back to what no anchor holds (a seq that
        -- is no whole number, a key that is no session id, a head that is not hex) made
        -- a cast raise, and the tampering read as a verification that could not finish.
        -- They are read again without those casts: such a head is NULL (its anchor is
        -- then 'altered'). Rows are never returned before this: the findings are sorted
        -- (ORDER BY) only once every one is known. The casts stay the common path: read
        -- safely, each head costs about five times as much (a verification reads every
        -- anchored head in each batch).
        EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range
                       OR invalid_parameter_value THEN
            IF v_safe THEN
                RAISE;
            END IF;
            v_safe := true;
        END;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.verify_chain(uuid, timestamptz, uuid, uuid) FROM public;
