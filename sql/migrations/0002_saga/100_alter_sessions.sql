-- Sessions, for the undo walk and its operators:
--   halt_undo_id  the undo entry the walk stopped at (a barrier whose irreversible call
--                 may have acted, or a compensation that failed for good); resume_session
--                 reads it to know what it is resuming past. NULL unless halted by the walk.
--   resolved_by / resolved_at / resolution
--                 set together, once, by abandon_session: the session stays halted and
--                 a human has taken responsibility for it. Only a halted session can be
--                 resolved, and a resolved one can never leave halted (the CHECK below).
ALTER TABLE undolog.undolog_sessions
ADD COLUMN halt_undo_id uuid,
ADD COLUMN resolved_by text,
ADD COLUMN resolved_at timestamptz,
ADD COLUMN resolution text,
ADD CONSTRAINT undolog_sessions_resolution_check CHECK (
    (resolved_by IS NULL) = (resolved_at IS NULL)
    AND (resolved_at IS NULL) = (resolution IS NULL)
    AND (resolved_at IS NULL OR state = 'halted')
),
ADD CONSTRAINT undolog_sessions_halt_check CHECK (halt_undo_id IS NULL OR state = 'halted');

-- recover() scans the sessions whose walk may have to run.
CREATE INDEX undolog_sessions_walk_idx
ON undolog.undolog_sessions (updated_at) WHERE state IN ('failed', 'compensating');
