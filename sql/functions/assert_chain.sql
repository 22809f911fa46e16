-- undolog.assert_chain: undolog.verify_chain as a check: raises UL027 naming the first
-- row that does not match its chain (and how many do), or returns the number of
-- sessions verified. For a scheduled job in SQL alone (psql, pg_cron).
CREATE OR REPLACE FUNCTION undolog.assert_chain(
    p_session_id uuid DEFAULT NULL,
    p_since timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_first record;
    v_count bigint;
BEGIN
    SELECT f.*, pg_catalog.count(*) OVER () AS total INTO v_first
    FROM undolog.verify_chain(p_session_id, p_since) AS f
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL027',
            MESSAGE = pg_catalog.format(
                'the history does not match its chain: %s in %s %s (expected %s, found %s)',
                v_first.problem, v_first.table_name, v_first.row_key, v_first.expected,
                v_first.found),
            DETAIL = pg_catalog.format('%s rows do not match; session %s, seq %s',
                                       v_first.total, v_first.session_id, v_first.seq),
            HINT = 'List them all with `undolog verify`; see docs/operations/audit.md.';
    END IF;
    SELECT pg_catalog.count(DISTINCT e.session_id) INTO v_count
    FROM undolog.chain_events(p_session_id, p_since, p_records => FALSE) AS e;
    RETURN v_count;
END
$$;

REVOKE ALL ON FUNCTION undolog.assert_chain(uuid, timestamptz) FROM public;
