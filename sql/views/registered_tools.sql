-- undolog.registered_tools: the tool registry for people and the CLI (`undolog tools
-- list`): each registration with its owner, tier, compensation, on_reject (what a human's
-- refusal of its call does to the session), who registered it and,
-- once an operator retired it, who, when and why. live is false for a retired one.
-- security_invoker: the reader's row-level security applies, so an agent sees only its
-- own login's tools and approver/operator see every one.
CREATE OR REPLACE VIEW undolog.registered_tools
WITH (security_invoker = TRUE) AS
SELECT
    t.tool_id,
    t.owner_role,
    t.tool_name,
    t.tier,
    t.compensation,
    t.registered_at,
    t.registered_by,
    t.retired_at IS NULL AS live,
    t.retired_at,
    t.retired_by,
    t.retire_reason,
    t.on_reject
FROM undolog.undolog_tools AS t;
