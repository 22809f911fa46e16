-- undolog.retire_tool: an operator ends a tool's registration, recording who decided
-- (p_by, the human, checked like every operator function's), why, when and from which
-- login. New calls naming the tool are then refused (UL017) until it is registered
-- again; calls already journaled keep their registration, and the undo walk still runs
-- the compensation they were journaled with. Answers the retirement's time.
-- UL008 blank p_by or p_reason, or an unknown or already retired tool_id.
CREATE OR REPLACE FUNCTION undolog.retire_tool(p_tool_id uuid, p_by text, p_reason text)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM undolog.check_operator(p_by);
    IF undolog.is_blank(p_reason) OR length(p_reason) > 8192 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'p_reason must say why the tool is retired: '
                      'non-blank text of at most 8192 characters',
            HINT = 'Say why, e.g. ''replaced by refund_v2'': undolog tools retire TOOL --owner '
                   'LOGIN --by WHO --reason TEXT.';
    END IF;
    UPDATE undolog.undolog_tools AS t
    SET retired_at = clock_timestamp(), retired_by = p_by, retire_reason = p_reason,
        retired_actor = session_user
    WHERE t.tool_id = p_tool_id AND t.retired_at IS NULL
    RETURNING t.retired_at INTO v_at;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = pg_catalog.format('tool %s is unknown or already retired', p_tool_id),
            HINT = 'Check the id: undolog tools list shows the live registrations.';
    END IF;
    RETURN v_at;
END
$$;

REVOKE ALL ON FUNCTION undolog.retire_tool(uuid, text, text) FROM public;
