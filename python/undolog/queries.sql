-- The SQL that the Python binding, the CLI and the faces send, by name (undolog.queries).
-- Named parameters, and the engine's functions called in named notation.

-- name: complete_session
-- A session's end, when its agent finished without error.
SELECT undolog.complete_session(p_session_id => %(session_id)s)

-- name: fail_session
-- A session's end, when its agent failed: the undo walk is due.
SELECT undolog.fail_session(p_session_id => %(session_id)s, p_error => %(error)s)

-- name: approval_session
-- The session of an approval request the reader may see (a signed link names only the
-- request): the dashboard's person, under their grants and row-level security.
SELECT session_id FROM undolog.session_approvals WHERE approval_id = %(approval_id)s

-- name: listen_approvals
-- The delivery worker's wake-up: a new approval request (or a decision) is NOTIFYed here.
LISTEN undolog_approvals

-- name: listen_notifications
-- The delivery worker's other wake-up: an operator's retry, or a new channel.
LISTEN undolog_notifications
