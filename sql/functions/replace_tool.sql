-- undolog.replace_tool: an operator registers a tool (undolog.register_tool, for p_owner)
-- and, when its live registration differs (register_tool's UL018), retires that one
-- (undolog.retire_tool, recorded with p_by and p_reason) and registers the new one, in
-- the caller's transaction. Retired and registered in two transactions, the name is its
-- owner's in between, and a running agent's binding registers it again, with its own
-- tier, on its next call: here an agent's register_tool of the name waits for this
-- transaction, then finds the operator's registration. Answers the new (or, when the
-- live registration already is this one, the live) tool_id, and the retired tool_id
-- (NULL when nothing was retired: also when the live registration, read again under its
-- lock, became this one meanwhile: another operator's identical replacement). The one
-- definition of "replace a registration":
-- `undolog tools register --replace` and the dashboard's register form call it.
-- UL008 blank p_by or p_reason (checked first, even when nothing is to be retired);
-- otherwise what register_tool and retire_tool raise (UL006, UL007, UL008, UL009; UL018
-- only when another transaction registered the name differently again meanwhile).
CREATE OR REPLACE FUNCTION undolog.replace_tool(
    p_tool_name text,
    p_tier text,
    p_compensation jsonb,
    p_owner text,
    p_on_reject text,
    p_by text,
    p_reason text
)
RETURNS TABLE (tool_id uuid, retired uuid)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_tool_id uuid;
    v_retired uuid;
    v_live uuid;
BEGIN
    PERFORM undolog.check_operator(p_by);
    IF undolog.is_blank(p_reason) OR length(p_reason) > 8192 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL008',
            MESSAGE = 'p_reason must say why the live registration is replaced: '
                      'non-blank text of at most 8192 characters',
            HINT = 'Say why, e.g. ''pinned irreversible: it pays out'': undolog tools register '
                   'TOOL --owner LOGIN --tier TIER --replace --by WHO --reason TEXT.';
    END IF;
    BEGIN
        v_tool_id := undolog.register_tool(p_tool_name, p_tier, p_compensation, p_owner,
                                           p_on_reject);
    EXCEPTION WHEN SQLSTATE 'UL018' THEN
        v_tool_id := NULL;  -- the live registration differs: retired below
    END;
    IF v_tool_id IS NULL THEN
        -- Locked: an operator's retirement committed meanwhile leaves nothing to retire,
        -- and the live registration is compared again (register_tool's own comparison,
        -- under the lock): another operator's replacement with this very definition,
        -- committed meanwhile, is answered, not retired and registered again for nothing.
        SELECT t.tool_id INTO v_live
        FROM undolog.undolog_tools AS t
        WHERE t.owner_role = coalesce(p_owner, session_user) AND t.tool_name = p_tool_name
          AND t.retired_at IS NULL
        FOR UPDATE;
        IF v_live IS NOT NULL THEN
            BEGIN
                v_tool_id := undolog.register_tool(p_tool_name, p_tier, p_compensation,
                                                   p_owner, p_on_reject);
            EXCEPTION WHEN SQLSTATE 'UL018' THEN
                PERFORM undolog.retire_tool(v_live, p_by, p_reason);
                v_retired := v_live;
            END;
        END IF;
        IF v_tool_id IS NULL THEN
            v_tool_id := undolog.register_tool(p_tool_name, p_tier, p_compensation, p_owner,
                                               p_on_reject);
        END IF;
    END IF;
    tool_id := v_tool_id;
    retired := v_retired;
    RETURN NEXT;
END
$$;

REVOKE ALL ON FUNCTION undolog.replace_tool(text, text, jsonb, text, text, text, text)
FROM public;
