-- undolog.prune_month_rows: delete the rows of the plain tables that point into the
-- effects whose executed_at lies in [p_from, p_to): undo stack (with each call's
-- exactly-once key, and its entries' history), approval requests. Called by retention
-- just before the month's partitions go, in the same transaction. Answers the number of
-- rows deleted. Each DELETE goes through its table's guard by undolog.set_append_only_bypass,
-- opened for that one table and statement and closed right after. These DELETEs take
-- only ROW EXCLUSIVE locks: intercepts keep inserting meanwhile (a replay of one of these
-- very calls waits for this transaction, then finds its session finished).
CREATE OR REPLACE FUNCTION undolog.prune_month_rows(p_from timestamptz, p_to timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_total bigint := 0;
    v_count bigint;
BEGIN
    -- The history of those undo entries first, while the entries still say which they are.
    PERFORM undolog.set_append_only_bypass('undolog.undolog_undo_history');
    DELETE FROM undolog.undolog_undo_history AS h
    USING undolog.undolog_undo_stack AS u
    WHERE u.executed_at >= p_from AND u.executed_at < p_to
      AND h.undo_id = u.undo_id AND h.session_id = u.session_id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_total := v_total + v_count;

    PERFORM undolog.set_append_only_bypass('undolog.undolog_undo_stack');
    DELETE FROM undolog.undolog_undo_stack AS u
    WHERE u.executed_at >= p_from AND u.executed_at < p_to;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_total := v_total + v_count;

    PERFORM undolog.set_append_only_bypass('undolog.undolog_approval_requests');
    DELETE FROM undolog.undolog_approval_requests AS a
    WHERE a.executed_at >= p_from AND a.executed_at < p_to;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_total := v_total + v_count;

    PERFORM undolog.set_append_only_bypass(NULL);
    RETURN v_total;
END
$$;

REVOKE ALL ON FUNCTION undolog.prune_month_rows(timestamptz, timestamptz) FROM public;
