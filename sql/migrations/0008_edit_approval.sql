-- Edit, then approve: an approver may change an IRREVERSIBLE call's arguments as they
-- approve it (undolog.approve_edited). The call's effect keeps the arguments the agent
-- asked with (its args are part of its identity and signature); the request records the
-- arguments approved instead, beside who decided (decided_by, decided_role) and why
-- (reason). NULL: the call was approved as asked, or not approved. Set only by the one
-- decision a request gets, so frozen with it (approval_requests_guard).
ALTER TABLE undolog.undolog_approval_requests
ADD COLUMN approved_args jsonb;

ALTER TABLE undolog.undolog_approval_requests
ADD CONSTRAINT undolog_approval_requests_approved_args_check CHECK (
    approved_args IS NULL
    OR (state = 'approved' AND jsonb_typeof(approved_args) = 'object')
);

COMMENT ON COLUMN undolog.undolog_approval_requests.approved_args IS
'The arguments the approver approved instead of the requested ones (the effect''s args); '
'NULL when the call was approved as asked, or not approved.';

-- decide_approval gains p_args (sql/functions/decide_approval.sql): the old signature
-- goes, so that exactly one decide_approval exists and approve/reject/expire_approvals
-- resolve to it.
DROP FUNCTION IF EXISTS undolog.decide_approval(uuid, text, text, text);
