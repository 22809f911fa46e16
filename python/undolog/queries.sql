-- The SQL that the Python binding, the CLI and the faces send, by name (undolog.queries).
-- Named parameters, and the engine's functions called in named notation.

-- name: complete_session
-- A session's end, when its agent finished without error.
SELECT undolog.complete_session(p_session_id => %(session_id)s)

-- name: fail_session
-- A session's end, when its agent failed: the undo walk is due.
SELECT undolog.fail_session(p_session_id => %(session_id)s, p_error => %(error)s)

-- name: approve
-- A human allows an irreversible call (role undolog_approver): the agent's next try runs it.
SELECT undolog.approve(
    p_approval_id => %(approval_id)s, p_decided_by => %(decided_by)s, p_reason => %(reason)s
)

-- name: approve_edited
-- A human allows an irreversible call with the arguments they edited (the journal keeps both).
SELECT undolog.approve_edited(
    p_approval_id => %(approval_id)s,
    p_decided_by => %(decided_by)s,
    p_args => %(args)s,
    p_reason => %(reason)s
)

-- name: reject
-- A human refuses an irreversible call: it never runs.
SELECT undolog.reject(
    p_approval_id => %(approval_id)s, p_decided_by => %(decided_by)s, p_reason => %(reason)s
)

-- name: expire_approvals
-- The operator's periodic pass: every pending request past its deadline is expired.
SELECT * FROM undolog.expire_approvals()

-- name: approval_state
-- A request's state, as the caller may see it (an agent sees only its own sessions').
SELECT state FROM undolog.session_approvals WHERE approval_id = %(approval_id)s

-- name: session_halt
-- Where a session stands at its block's exit after an undo walk: its state, and for a
-- halted walk why it halted, the undo entry it stopped at, and whether it is the partial
-- walk of an undo_to (rollback_to, rollback_last).
SELECT s.state, s.error, s.halt_undo_id, s.undo_floor IS NOT NULL AS partial
FROM undolog.sessions_list AS s
WHERE s.session_id = %(session_id)s
