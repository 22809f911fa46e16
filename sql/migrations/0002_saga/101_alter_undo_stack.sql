-- The undo stack, for the walk:
--   state 'compensating'  the entry is in flight, claimed by a walker until claimed_until;
--                         after that the claim has expired and the walk may hand it out
--                         again (the walker is presumed dead).
--   claimed_by/at/until   the latest claim (kept after it ends, for the record).
ALTER TABLE undolog.undolog_undo_stack
ADD COLUMN claimed_by text,
ADD COLUMN claimed_at timestamptz,
ADD COLUMN claimed_until timestamptz,
DROP CONSTRAINT undolog_undo_stack_state_check,
ADD CONSTRAINT undolog_undo_stack_state_check CHECK (state IN (
    'pending', 'compensating', 'compensated', 'compensation_failed', 'skipped'
)),
ADD CONSTRAINT undolog_undo_stack_claim_check CHECK (
    state <> 'compensating' OR claimed_until IS NOT NULL
);

-- The walk always wants the top unfinished entry of one session. Without this index it
-- would scan back over every finished entry above it: quadratic over a long walk.
CREATE INDEX undolog_undo_stack_unfinished_idx
ON undolog.undolog_undo_stack (session_id, stack_position DESC)
WHERE state IN ('pending', 'compensating');
