-- The tool registry: which tools each agent login may journal, with the tier and the
-- compensation their registration fixed. intercept refuses a call naming no live tool of
-- the session's owner, and the undo walk runs the compensation the registration names,
-- so an agent can neither choose its tier nor forge what the walk does.

CREATE TABLE undolog.undolog_tools (
    tool_id uuid NOT NULL,
    -- The login whose sessions may call the tool (a session's owner_role).
    owner_role text NOT NULL,
    tool_name text NOT NULL,
    tier text NOT NULL,
    -- {"name", "args", "max_attempts"} for a compensable tool; NULL for an irreversible one.
    compensation jsonb,
    registered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    registered_by text NOT NULL DEFAULT session_user,
    -- An operator's retirement (retire_tool): who decided, why, and the login that did it.
    retired_at timestamptz,
    retired_by text,
    retire_reason text,
    retired_actor text,
    PRIMARY KEY (tool_id),
    CONSTRAINT undolog_tools_tier_check CHECK (
        tier IN ('compensable', 'irreversible')
    ),
    CONSTRAINT undolog_tools_compensation_check CHECK (
        (tier = 'compensable') = (compensation IS NOT NULL)
    ),
    CONSTRAINT undolog_tools_retired_check CHECK (
        (retired_at IS NULL) = (retired_by IS NULL)
    )
);

-- One live registration per (owner, tool): the one lookup intercept makes per call.
CREATE UNIQUE INDEX undolog_tools_live_key
ON undolog.undolog_tools (owner_role, tool_name) WHERE retired_at IS NULL;

COMMENT ON TABLE undolog.undolog_tools IS
'Registered tools: the tier and compensation each agent login''s journaled tools have.';

-- An agent reads its own login's tools; approvers and operators all of them.
ALTER TABLE undolog.undolog_tools ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_tools FROM public;

-- The registration each call was journaled under. NULL on rows journaled before the
-- registry existed: their undo entry's descriptor is all there is.
ALTER TABLE undolog.undolog_effect_log ADD COLUMN tool_id uuid;

-- undolog:after-repeatables
-- Time-ordered ids (undolog.uuid_v7, a repeatable function), as for the journal's rows.
ALTER TABLE undolog.undolog_tools
ALTER COLUMN tool_id SET DEFAULT undolog.uuid_v7();
