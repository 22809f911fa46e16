-- The SQL that the Python binding, the CLI and the faces send, by name (undolog.queries).
-- Named parameters, and the engine's functions called in named notation.

-- name: complete_session
-- A session's end, when its agent finished without error.
SELECT undolog.complete_session(p_session_id => %(session_id)s)

-- name: fail_session
-- A session's end, when its agent failed: the undo walk is due.
SELECT undolog.fail_session(p_session_id => %(session_id)s, p_error => %(error)s)
