-- undolog.chain_impossible_rows: the history rows (of one session or all, from p_since
-- on, of the sessions in a range of ids, as undolog.chain_events chooses them) that hold
-- a value the engine never writes there, and that their canonical record cannot tell
-- from the value it did write. A canonical record writes a column's SQL NULL and the
-- JSON null alike (json_build_object), and changing the record would change the hash of
-- every row already written; the engine's own invariants tell the two apart instead:
--   a committed call's result (the committed record's 'result') is never SQL NULL:
--     commit writes a call that returned nothing as the JSON null;
--   a call journaled since migration 0013 (events_in_row) that never committed holds no
--     result at all: its created record writes 'result' null whatever the column holds,
--     and a compensation is handed the column;
--   a history row's detail (session, effect and undo history) is SQL NULL (none) or a
--     JSON object, never the JSON null. (Nor any other JSON value, but a change to one of
--     those changes the record: the hash finds it.)
-- Each such row is answered as undolog.verify_chain answers a finding (its table, key and
-- seq as chain_events names them), problem 'impossible', expected what the engine writes,
-- found what is there. The one definition of these rules: verify_chain reads them here.
-- Not granted to any role: undolog.verify_chain, SECURITY DEFINER, calls it as the owner.
CREATE OR REPLACE FUNCTION undolog.chain_impossible_rows(
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
SET search_path = undolog, pg_temp
-- Planned for the arguments given, as chain_events: one session's rows (or a range's) by
-- their keys.
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    RETURN QUERY
    SELECT i.session_id, i.seq, i.table_name, i.row_key, 'impossible'::text, i.expected,
           i.found
    FROM (
        SELECT h.session_id, h.chain_seq AS seq, 'undolog_session_history' AS table_name,
               'history_id=' || h.history_id AS row_key, h.at,
               'detail: SQL NULL or a JSON object' AS expected, 'detail: JSON null' AS found
        FROM undolog.undolog_session_history AS h
        WHERE pg_catalog.jsonb_typeof(h.detail) = 'null'
        UNION ALL
        SELECT h.session_id, h.chain_seq, 'undolog_effect_history',
               'history_id=' || h.history_id, h.at,
               'detail: SQL NULL or a JSON object', 'detail: JSON null'
        FROM undolog.undolog_effect_history AS h
        WHERE pg_catalog.jsonb_typeof(h.detail) = 'null'
        UNION ALL
        SELECT h.session_id, h.chain_seq, 'undolog_undo_history',
               'history_id=' || h.history_id, h.at,
               'detail: SQL NULL or a JSON object', 'detail: JSON null'
        FROM undolog.undolog_undo_history AS h
        WHERE pg_catalog.jsonb_typeof(h.detail) = 'null'
        UNION ALL
        SELECT e.session_id, e.commit_seq, 'undolog_effect_log',
               'effect_id=' || e.effect_id || ' committed', e.committed_at,
               'result: a JSON value (JSON null for none: commit writes it so)',
               'result: SQL NULL'
        FROM undolog.undolog_effect_log AS e
        WHERE e.committed_at IS NOT NULL AND e.result_snapshot IS NULL
        UNION ALL
        SELECT e.session_id, e.chain_seq, 'undolog_effect_log',
               'effect_id=' || e.effect_id || ' created', e.executed_at,
               'result: SQL NULL (a call that never committed has none)',
               'result: JSON ' || pg_catalog.jsonb_typeof(e.result_snapshot)
        FROM undolog.undolog_effect_log AS e
        WHERE e.events_in_row AND e.committed_at IS NULL AND e.result_snapshot IS NOT NULL
    ) AS i
    WHERE (p_session_id IS NULL OR i.session_id = p_session_id)
      AND (p_since IS NULL OR i.at >= p_since)
      AND (p_after_session IS NULL OR i.session_id > p_after_session)
      AND (p_through_session IS NULL OR i.session_id <= p_through_session);
END
$$;

REVOKE ALL ON FUNCTION undolog.chain_impossible_rows(uuid, timestamptz, uuid, uuid) FROM public;
