-- undolog_approval_requests.decided_role: the database login (session_user) that made the
-- decision. decided_by is whatever name the approver's client states (a person, an
-- e-mail); decided_role is what the database itself authenticated, so an audit can
-- always tell which login spoke for that person. NULL while pending.
ALTER TABLE undolog.undolog_approval_requests
ADD COLUMN decided_role text;

COMMENT ON COLUMN undolog.undolog_approval_requests.decided_by IS
'Who decided, as the approver stated it (non-blank when approved/rejected); '
'NULL when the engine expired the request.';
COMMENT ON COLUMN undolog.undolog_approval_requests.decided_role IS
'The database login (session_user) that recorded the decision or the expiry.';
