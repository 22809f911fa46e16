-- 0001_baseline: the engine's tables, each created whole (columns, constraints, indexes,
-- row-level security, comments), its roles, and the partitions of the install month.
-- Run once per database and recorded with its checksum (undolog.undolog_migrations):
-- never edit it after a release; a change is a new sql/migrations/NNNN_name.sql.
-- Functions, views, triggers, policies and grants are not here: they are repeatable
-- sources (sql/functions/, sql/views/, sql/triggers/, sql/policies/, sql/grants.sql),
-- re-applied after the migrations by every migrate (python/undolog/migrations.py).
-- Every table of the journal carries session_id, and every key includes it: the unit of
-- distribution on Citus (README, "Running on Citus"; tests/test_layout.py checks it).

------------------------------------------------------------------------------------------
-- Roles and the schema's privileges
------------------------------------------------------------------------------------------

-- Group roles (NOLOGIN). Roles are cluster-wide, so an install into a second database
-- finds them already there. Grant them to login roles: GRANT undolog_agent TO my_app;
DO $roles$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['undolog_agent', 'undolog_approver', 'undolog_operator'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
            -- The migrate lock is per database; an install into another database of the
            -- cluster may create the same role at the same moment: theirs serves as well.
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;
END
$roles$;

-- The schema itself is created by sql/bootstrap.sql; its USAGE grant is in grants.sql.
REVOKE ALL ON SCHEMA undolog FROM public;

-- Functions are executable by PUBLIC by default; every function file also revokes
-- explicitly, this catches any we forget.
ALTER DEFAULT PRIVILEGES IN SCHEMA undolog REVOKE EXECUTE ON FUNCTIONS FROM public;

-- The runner's own records (bootstrap.sql) are readable only through grants.sql.
REVOKE ALL ON undolog.undolog_migrations FROM public;
REVOKE ALL ON undolog.undolog_repeatables FROM public;

------------------------------------------------------------------------------------------
-- undolog_sessions
------------------------------------------------------------------------------------------

-- One row per agent session. state follows undolog.session_transition_allowed; every
-- change is appended to undolog_session_history by the guard trigger.
--   halt_undo_id  the undo entry the walk stopped at (a barrier whose irreversible call
--                 may have acted, or a compensation that failed for good); resume_session
--                 reads it to know what it is resuming past. NULL unless halted by the walk.
--   resolved_by / resolved_at / resolution
--                 set together, once, by abandon_session: the session stays halted and
--                 a human has taken responsibility for it. Only a halted session can be
--                 resolved, and a resolved one can never leave halted (the CHECK below).
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
    halt_undo_id uuid,
    resolved_by text,
    resolved_at timestamptz,
    resolution text,
    CONSTRAINT undolog_sessions_state_check CHECK (state IN (
        'active', 'completed', 'failed', 'awaiting_approval',
        'compensating', 'compensated', 'halted'
    )),
    CONSTRAINT undolog_sessions_metadata_check CHECK (jsonb_typeof(metadata) = 'object'),
    CONSTRAINT undolog_sessions_resolution_check CHECK (
        (resolved_by IS NULL) = (resolved_at IS NULL)
        AND (resolved_at IS NULL) = (resolution IS NULL)
        AND (resolved_at IS NULL OR state = 'halted')
    ),
    CONSTRAINT undolog_sessions_halt_check CHECK (halt_undo_id IS NULL OR state = 'halted')
);

CREATE INDEX undolog_sessions_lease_idx
ON undolog.undolog_sessions (lease_expires_at) WHERE state = 'active';

-- recover() scans the sessions whose walk may have to run.
CREATE INDEX undolog_sessions_walk_idx
ON undolog.undolog_sessions (updated_at) WHERE state IN ('failed', 'compensating');

-- The sessions that hold their months against retention (undolog.unfinished_sessions):
-- few at any time, however many finished sessions the journal has kept over the years.
CREATE INDEX undolog_sessions_unfinished_idx
ON undolog.undolog_sessions (session_id)
WHERE state NOT IN ('completed', 'compensated') AND resolved_at IS NULL;

-- The dashboard's sessions list pages newest first with a keyset (created_at,
-- session_id) < (last seen), optionally filtered by state: each page is one short index
-- range, whatever the number of sessions (a million: bench/bench_dashboard.py).
CREATE INDEX undolog_sessions_recent_idx
ON undolog.undolog_sessions (created_at DESC, session_id DESC);

CREATE INDEX undolog_sessions_state_recent_idx
ON undolog.undolog_sessions (state, created_at DESC, session_id DESC);

COMMENT ON TABLE undolog.undolog_sessions IS
'Agent sessions: state machine of DESIGN.md, with a lease renewed by heartbeat().';

-- RLS is ENABLEd, never FORCEd: the owner (inside the SECURITY DEFINER API) sees and
-- changes every row; the policies (sql/policies/) filter what a role reads directly.
ALTER TABLE undolog.undolog_sessions ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_sessions FROM public;

------------------------------------------------------------------------------------------
-- undolog_session_history
------------------------------------------------------------------------------------------

-- Append-only: every session state change, written by the sessions guard trigger.
CREATE TABLE undolog.undolog_session_history (
    session_id uuid NOT NULL,
    history_id bigint GENERATED ALWAYS AS IDENTITY,
    from_state text,
    to_state text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor text NOT NULL DEFAULT session_user,
    detail jsonb,
    PRIMARY KEY (session_id, history_id)
);

ALTER TABLE undolog.undolog_session_history ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_session_history FROM public;

------------------------------------------------------------------------------------------
-- undolog_effect_log
------------------------------------------------------------------------------------------

-- The effect journal: one row per journaled call, range-partitioned by month on
-- executed_at (the time of the first intercept, UTC months). Identity columns never
-- change; state follows undolog.effect_transition_allowed (guard trigger).
-- Lookups always carry the partition key: the signature registry maps a signature or an
-- effect id to (session_id, effect_id, executed_at).
CREATE TABLE undolog.undolog_effect_log (
    effect_id uuid NOT NULL,
    session_id uuid NOT NULL,
    executed_at timestamptz NOT NULL,
    call_signature text NOT NULL,
    step_index integer NOT NULL,
    tool_name text NOT NULL,
    tier text NOT NULL,
    args jsonb NOT NULL,
    state text NOT NULL,
    result_snapshot jsonb,
    error text,
    attempts integer NOT NULL DEFAULT 0,
    replay_count integer NOT NULL DEFAULT 0,
    last_replayed_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- Who made the call: the login that intercepted it (session_user; inside the
    -- SECURITY DEFINER API current_user is the engine's owner). A login holding the
    -- approver or operator role may make a call in another agent's session, so the
    -- session's owner alone cannot tell decide_approval who asked: no login approves a
    -- call it made. Part of the effect's identity (effect_log_guard).
    intercepted_by text NOT NULL DEFAULT session_user,
    PRIMARY KEY (session_id, effect_id, executed_at)
) PARTITION BY RANGE (executed_at);
-- No CHECK constraints on tier and state: the guard trigger (effect_log_guard) admits
-- only a valid tier and a starting state on INSERT and only the transitions of
-- effect_transition_allowed on UPDATE, and a CHECK is recompiled for every statement
-- that writes a row (~27 us per call, bench/bench_intercept.py).

-- Catches any write whose month has no partition yet, so no write is ever lost;
-- ensure_partitions() creates months ahead of time. Its TRUNCATE guard is created at the
-- end of this file, once the trigger function exists.
CREATE TABLE undolog.undolog_effect_log_default
PARTITION OF undolog.undolog_effect_log DEFAULT;

COMMENT ON TABLE undolog.undolog_effect_log IS
'The effect journal: one row per journaled tool call, partitioned by month on executed_at.';

-- Policies and grants are on the partitioned parent, which is how everyone reads it; the
-- partitions carry no grant at all, so a role cannot go around the policies.
ALTER TABLE undolog.undolog_effect_log ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_effect_log FROM public;
REVOKE ALL ON undolog.undolog_effect_log_default FROM public;

------------------------------------------------------------------------------------------
-- undolog_effect_history
------------------------------------------------------------------------------------------

-- Append-only: every effect state change and every replay, written by the effect log's
-- guard trigger. Partitioned like the effect log (on the effect's executed_at), so a
-- month of history leaves with its month of effects.
CREATE SEQUENCE undolog.undolog_effect_history_id_seq;

CREATE TABLE undolog.undolog_effect_history (
    session_id uuid NOT NULL,
    effect_id uuid NOT NULL,
    executed_at timestamptz NOT NULL,
    history_id bigint NOT NULL DEFAULT nextval('undolog.undolog_effect_history_id_seq'),
    event text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor text NOT NULL DEFAULT session_user,
    detail jsonb,
    PRIMARY KEY (session_id, history_id, executed_at)
) PARTITION BY RANGE (executed_at);

CREATE TABLE undolog.undolog_effect_history_default
PARTITION OF undolog.undolog_effect_history DEFAULT;

ALTER TABLE undolog.undolog_effect_history ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_effect_history FROM public;
REVOKE ALL ON undolog.undolog_effect_history_default FROM public;

------------------------------------------------------------------------------------------
-- undolog_signature_registry
------------------------------------------------------------------------------------------

-- The exactly-once guard, per session. A unique index on the partitioned effect log
-- would have to contain executed_at, so uniqueness of (session_id, call_signature) lives
-- here, in a plain table that intercept inserts into with ON CONFLICT DO NOTHING. It also
-- maps a signature or an effect id to the effect's partition key.
-- No uniqueness across sessions: the signature's preimage holds the session id, so the
-- same signature under another session can only be a forged one, and it is looked up
-- within its own session, where it finds nothing of the first (a key without session_id
-- could not be enforced on Citus either).
CREATE TABLE undolog.undolog_signature_registry (
    session_id uuid NOT NULL,
    call_signature text NOT NULL,
    effect_id uuid NOT NULL,
    executed_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, call_signature)
);
-- The signature's form (64 lowercase hex) is checked by intercept before it writes here,
-- and only the owner writes this table; a CHECK would cost a regex per call (~14 us).

-- commit/fail address an effect by id alone.
CREATE UNIQUE INDEX undolog_signature_registry_effect_key
ON undolog.undolog_signature_registry (effect_id, session_id);

-- Retention deletes a dropped month's registry rows by range of executed_at: without
-- this index each drop would scan the whole registry (years of calls). executed_at only
-- grows, so intercept's insert always lands on the rightmost leaf: cheap.
CREATE INDEX undolog_signature_registry_executed_at_idx
ON undolog.undolog_signature_registry (executed_at);

-- An internal index (signature -> effect), readable by approver and operator for
-- diagnosis, not by the agent. RLS is enabled like on every session table, so that a
-- later grant to the agent could not expose other sessions' signatures.
ALTER TABLE undolog.undolog_signature_registry ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_signature_registry FROM public;

------------------------------------------------------------------------------------------
-- undolog_undo_stack
------------------------------------------------------------------------------------------

-- The undo stack, pushed by intercept in the same transaction as the effect, before the
-- body runs; the walk pops by stack_position DESC. A COMPENSABLE call pushes its
-- compensation; an IRREVERSIBLE call pushes a barrier (compensation NULL), so that the
-- walk knows where, among the compensations, the call that nothing can undo stands.
--   state 'compensating'  the entry is in flight, claimed by a walker until claimed_until;
--                         after that the claim has expired and the walk may hand it out
--                         again (the walker is presumed dead).
--   claimed_by/at/until   the latest claim (kept after it ends, for the record).
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
    claimed_by text,
    claimed_at timestamptz,
    claimed_until timestamptz,
    PRIMARY KEY (session_id, undo_id),
    CONSTRAINT undolog_undo_stack_max_attempts_check CHECK (max_attempts > 0),
    CONSTRAINT undolog_undo_stack_state_check CHECK (state IN (
        'pending', 'compensating', 'compensated', 'compensation_failed', 'skipped'
    )),
    CONSTRAINT undolog_undo_stack_claim_check CHECK (
        state <> 'compensating' OR claimed_until IS NOT NULL
    )
);

CREATE UNIQUE INDEX undolog_undo_stack_position_key
ON undolog.undolog_undo_stack (session_id, stack_position);

CREATE UNIQUE INDEX undolog_undo_stack_effect_key
ON undolog.undolog_undo_stack (effect_id, session_id);

-- claim/complete/fail_compensation address an entry by undo id alone.
CREATE UNIQUE INDEX undolog_undo_stack_undo_key
ON undolog.undolog_undo_stack (undo_id, session_id);

-- The walk always wants the top unfinished entry of one session. Without this index it
-- would scan back over every finished entry above it: quadratic over a long walk.
CREATE INDEX undolog_undo_stack_unfinished_idx
ON undolog.undolog_undo_stack (session_id, stack_position DESC)
WHERE state IN ('pending', 'compensating');

-- Retention deletes a dropped month's undo entries by range of executed_at.
CREATE INDEX undolog_undo_stack_executed_at_idx
ON undolog.undolog_undo_stack (executed_at);

ALTER TABLE undolog.undolog_undo_stack ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_undo_stack FROM public;

------------------------------------------------------------------------------------------
-- undolog_undo_history
------------------------------------------------------------------------------------------

-- Append-only: every state change of an undo-stack entry, and every new claim of an
-- entry whose previous claim expired, written by the undo stack's guard trigger. It keeps
-- what the entry itself overwrites: the error of each failed attempt, each claim.
CREATE TABLE undolog.undolog_undo_history (
    session_id uuid NOT NULL,
    history_id bigint GENERATED ALWAYS AS IDENTITY,
    undo_id uuid NOT NULL,
    event text NOT NULL,
    from_state text NOT NULL,
    to_state text NOT NULL,
    attempt integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor text NOT NULL DEFAULT session_user,
    detail jsonb,
    PRIMARY KEY (session_id, history_id),
    CONSTRAINT undolog_undo_history_event_check CHECK (event IN ('transition', 'reclaimed'))
);

CREATE INDEX undolog_undo_history_undo_idx
ON undolog.undolog_undo_history (undo_id, session_id);

-- Staff read it to understand a halted session; agents do not. RLS is enabled like on
-- every table a role can read, so a later grant to the agent would show it nothing
-- until a policy says what.
ALTER TABLE undolog.undolog_undo_history ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_undo_history FROM public;

------------------------------------------------------------------------------------------
-- undolog_maintenance_lock
------------------------------------------------------------------------------------------
-- The partition-maintenance lock: one row, locked FOR UPDATE by ensure_partitions,
-- drop_partitions and maintain_partitions (undolog.lock_partition_maintenance, inside
-- SECURITY DEFINER, as the owner) so that two maintainers never run at once. Nobody else
-- can take it: locking a row needs UPDATE on the table, which no role but the owner
-- holds (an advisory lock on a documented key could be held by any login, stopping all
-- maintenance). Not a journal table: it stays on the coordinator, like the runner's.
CREATE TABLE undolog.undolog_maintenance_lock (
    singleton boolean PRIMARY KEY DEFAULT TRUE,
    CONSTRAINT undolog_maintenance_lock_singleton CHECK (singleton)
);
INSERT INTO undolog.undolog_maintenance_lock DEFAULT VALUES;
REVOKE ALL ON undolog.undolog_maintenance_lock FROM public;

------------------------------------------------------------------------------------------
-- undolog_operator_actions
------------------------------------------------------------------------------------------

-- Append-only: every decision an operator takes on a session (resume, retry, abandon,
-- rollback), with who (performed_by, the human the operator function was told about) and
-- why. actor is the database login that made the call.
CREATE TABLE undolog.undolog_operator_actions (
    session_id uuid NOT NULL,
    action_id bigint GENERATED ALWAYS AS IDENTITY,
    action text NOT NULL,
    undo_id uuid,
    performed_by text NOT NULL,
    reason text,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor text NOT NULL DEFAULT session_user,
    PRIMARY KEY (session_id, action_id),
    CONSTRAINT undolog_operator_actions_action_check CHECK (
        action IN ('resume', 'retry', 'abandon', 'rollback')
    )
);

-- Staff only, like the undo history.
ALTER TABLE undolog.undolog_operator_actions ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_operator_actions FROM public;

------------------------------------------------------------------------------------------
-- undolog_approval_requests
------------------------------------------------------------------------------------------

-- One row per IRREVERSIBLE call awaiting (or past) a human decision.
--   decided_by    whatever name the approver's client states (a person, an e-mail);
--   decided_role  the database login (session_user) that made the decision: what the
--                 database itself authenticated, so an audit can always tell which login
--                 spoke for that person. NULL while pending.
-- A request is pending with no decision, or decided with a time and a login; a human
-- decision (approved, rejected) always names who decided. 'expired' may lack decided_by:
-- then the engine expired it (expire_approvals), no person.
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
    decided_role text,
    PRIMARY KEY (session_id, approval_id),
    CONSTRAINT undolog_approval_requests_state_check CHECK (state IN (
        'pending', 'approved', 'rejected', 'expired'
    )),
    CONSTRAINT undolog_approval_requests_decision_check CHECK (
        CASE state
            WHEN 'pending'
                THEN
                    decided_at IS NULL AND decided_by IS NULL AND reason IS NULL
                    AND decided_role IS NULL
            WHEN 'expired' THEN decided_at IS NOT NULL AND decided_role IS NOT NULL
            ELSE
                decided_at IS NOT NULL AND decided_role IS NOT NULL
                AND decided_by IS NOT NULL AND decided_by ~ '\S'
        END
    )
);

CREATE UNIQUE INDEX undolog_approval_requests_approval_key
ON undolog.undolog_approval_requests (approval_id, session_id);

CREATE UNIQUE INDEX undolog_approval_requests_effect_key
ON undolog.undolog_approval_requests (effect_id, session_id);

-- expire_approvals scans the pending requests whose deadline has passed; the views list
-- the pending ones. Both stay cheap however many decided requests accumulate.
CREATE INDEX undolog_approval_requests_pending_idx
ON undolog.undolog_approval_requests (expires_at)
WHERE state = 'pending';

-- Retention deletes a dropped month's approval requests by range of executed_at.
CREATE INDEX undolog_approval_requests_executed_at_idx
ON undolog.undolog_approval_requests (executed_at);

COMMENT ON COLUMN undolog.undolog_approval_requests.decided_by IS
'Who decided, as the approver stated it (non-blank when approved/rejected); '
'NULL when the engine expired the request.';
COMMENT ON COLUMN undolog.undolog_approval_requests.decided_role IS
'The database login (session_user) that recorded the decision or the expiry.';

ALTER TABLE undolog.undolog_approval_requests ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_approval_requests FROM public;

-- undolog:after-repeatables
-- What follows needs the engine's functions: the runner applies it, in the same
-- transaction, after the repeatable sources (python/undolog/migrations.py).

-- TRUNCATE skips row triggers, and a statement trigger on a partitioned table does not
-- fire when a partition is truncated directly: each partition refuses it itself. These
-- belong to the default partitions (created above); undolog.create_month_partitions adds
-- the same trigger to each month it creates.
CREATE TRIGGER undolog_effect_log_no_truncate
BEFORE TRUNCATE ON undolog.undolog_effect_log_default
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();

CREATE TRIGGER undolog_effect_history_no_truncate
BEFORE TRUNCATE ON undolog.undolog_effect_history_default
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();

-- The current and the next month exist from the moment of install.
SELECT undolog.ensure_partitions(1);
