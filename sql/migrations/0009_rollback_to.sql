-- Undo to a point (undolog.rollback_to): a session's effects are undone from the top of
-- its undo stack down to a step, by the same walk as a failed session's, and the session
-- then goes on (compensating -> active).
--   undo_floor  while such a partial walk runs (or is halted): the lowest stack_position
--               it undoes. The walk (claim_compensation, due_sessions) does not go below
--               it, and the claim that finds nothing left at or above it sends the
--               session back to active and clears it. NULL otherwise: a whole walk.
--   undo_to     the latest rollback_to asked of the session, kept after it ended:
--               {"step", "floor", "by", "login", "reason", "at"}. Each one is also in the
--               session history (active -> compensating, and compensating -> active).
ALTER TABLE undolog.undolog_sessions
ADD COLUMN undo_floor bigint,
ADD COLUMN undo_to jsonb;

ALTER TABLE undolog.undolog_sessions
ADD CONSTRAINT undolog_sessions_undo_floor_check CHECK (
    undo_floor IS NULL OR (state IN ('compensating', 'halted') AND undo_to IS NOT NULL)
);

-- An operator's rollback_to is an operator action like the others.
ALTER TABLE undolog.undolog_operator_actions
DROP CONSTRAINT undolog_operator_actions_action_check;
ALTER TABLE undolog.undolog_operator_actions
ADD CONSTRAINT undolog_operator_actions_action_check CHECK (
    action IN ('resume', 'retry', 'abandon', 'rollback', 'rollback_to')
);
