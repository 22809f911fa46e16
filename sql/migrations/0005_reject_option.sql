-- What a human's refusal of an irreversible call does to its session, fixed by the tool's
-- registration like its tier: 'fail_session' (the rule so far: the session goes to its
-- undo walk) or 'continue' (the refusal is recorded, the call never runs, and the session
-- goes on: the agent learns the person's reason and may do something else).
ALTER TABLE undolog.undolog_tools
ADD COLUMN on_reject text NOT NULL DEFAULT 'fail_session';

ALTER TABLE undolog.undolog_tools
ADD CONSTRAINT undolog_tools_on_reject_check CHECK (
    on_reject IN ('fail_session', 'continue')
);

-- register_tool gains p_on_reject (sql/functions/register_tool.sql): the old signature
-- goes, so that exactly one register_tool exists and its grant (grants.sql) names it.
DROP FUNCTION IF EXISTS undolog.register_tool(text, text, jsonb, text);
