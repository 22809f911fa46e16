-- One row per agent session. state follows undolog.session_transition_allowed; every
-- change is appended to undolog_session_history by the guard trigger.
CREATE TABLE undolog.undolog_sessions (
    session_id uuid PRIMARY KEY,
    agent text,
    metadata jsonb NOT NULL DEFAULT '{}',
    -- The login that began the session (session_user: inside the SECURITY DEFINER API
    -- current_user is the engine's owner). Only it, or an approver/operator, may act on
    -- the session (undolog.check_session_caller), and an agent reads only its own rows.
    owner_role text NOT NULL DEFAULT session_user,
    state text NOT NULL DEFAULT 'active',
    lease_duration interval NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT undolog_sessions_state_check CHECK (state IN (
        'active', 'completed', 'failed', 'awaiting_approval',
        'compensating', 'compensated', 'halted'
    )),
    CONSTRAINT undolog_sessions_metadata_check CHECK (jsonb_typeof(metadata) = 'object')
);

CREATE INDEX undolog_sessions_lease_idx
ON undolog.undolog_sessions (lease_expires_at) WHERE state = 'active';

COMMENT ON TABLE undolog.undolog_sessions IS
'Agent sessions: state machine of DESIGN.md, with a lease renewed by heartbeat().';

REVOKE ALL ON undolog.undolog_sessions FROM public;
