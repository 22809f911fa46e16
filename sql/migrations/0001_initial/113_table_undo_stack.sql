-- The undo stack, pushed by intercept in the same transaction as the effect, before the
-- body runs; the walk pops by stack_position DESC. A COMPENSABLE call pushes its
-- compensation; an IRREVERSIBLE call pushes a barrier (compensation NULL), so that the
-- walk knows where, among the compensations, the call that nothing can undo stands.
CREATE TABLE undolog.undolog_undo_stack (
    undo_id uuid NOT NULL DEFAULT gen_random_uuid(),
    session_id uuid NOT NULL,
    stack_position bigint NOT NULL GENERATED ALWAYS AS IDENTITY,
    effect_id uuid NOT NULL,
    executed_at timestamptz NOT NULL,
    compensation jsonb,
    max_attempts integer,
    state text NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, undo_id),
    CONSTRAINT undolog_undo_stack_state_check CHECK (state IN (
        'pending', 'compensated', 'compensation_failed', 'skipped'
    )),
    CONSTRAINT undolog_undo_stack_max_attempts_check CHECK (max_attempts > 0)
);

CREATE UNIQUE INDEX undolog_undo_stack_position_key
ON undolog.undolog_undo_stack (session_id, stack_position);

CREATE UNIQUE INDEX undolog_undo_stack_effect_key
ON undolog.undolog_undo_stack (effect_id, session_id);

-- claim/complete/fail_compensation address an entry by undo id alone.
CREATE UNIQUE INDEX undolog_undo_stack_undo_key
ON undolog.undolog_undo_stack (undo_id, session_id);

REVOKE ALL ON undolog.undolog_undo_stack FROM public;
