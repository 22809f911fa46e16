-- One row per IRREVERSIBLE call awaiting (or past) a human decision.
CREATE TABLE undolog.undolog_approval_requests (
    approval_id uuid NOT NULL DEFAULT gen_random_uuid(),
    session_id uuid NOT NULL,
    effect_id uuid NOT NULL,
    executed_at timestamptz NOT NULL,
    state text NOT NULL DEFAULT 'pending',
    requested_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    decided_at timestamptz,
    decided_by text,
    reason text,
    PRIMARY KEY (session_id, approval_id),
    CONSTRAINT undolog_approval_requests_state_check CHECK (state IN (
        'pending', 'approved', 'rejected', 'expired'
    ))
);

CREATE UNIQUE INDEX undolog_approval_requests_approval_key
ON undolog.undolog_approval_requests (approval_id, session_id);

CREATE UNIQUE INDEX undolog_approval_requests_effect_key
ON undolog.undolog_approval_requests (effect_id, session_id);

REVOKE ALL ON undolog.undolog_approval_requests FROM public;
