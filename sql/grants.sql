-- Every privilege the engine grants to its roles, in one place: what an agent, an
-- approver and an operator may call and read. Applied again when it changes and after
-- any migration (GRANT is idempotent and takes no table lock; a table or view a migration
-- re-created has lost its grants). Taking a privilege away is a numbered migration
-- (REVOKE), since deleting a line here changes nothing in a database that already has it.
-- Nobody but the owner writes to any table: every write goes through a SECURITY DEFINER
-- function. Every function revokes PUBLIC's EXECUTE in its own file.

GRANT USAGE ON SCHEMA undolog TO undolog_agent, undolog_approver, undolog_operator;

-- The agent: its session's lifecycle and the journaled call.
GRANT EXECUTE ON FUNCTION undolog.begin_session(uuid, text, jsonb, interval) TO undolog_agent;
GRANT EXECUTE ON FUNCTION undolog.heartbeat(uuid) TO undolog_agent;
GRANT EXECUTE ON FUNCTION undolog.complete_session(uuid) TO undolog_agent;
GRANT EXECUTE ON FUNCTION undolog.fail_session(uuid, text) TO undolog_agent;
GRANT EXECUTE ON FUNCTION undolog.intercept(uuid, integer, text, text, jsonb, text, jsonb)
TO undolog_agent;
-- The same for a tool named by its registration's id (register_tool's answer).
GRANT EXECUTE ON FUNCTION undolog.intercept_tool(uuid, uuid, integer, jsonb, text)
TO undolog_agent;
GRANT EXECUTE ON FUNCTION undolog.commit(uuid, jsonb, boolean) TO undolog_agent;
GRANT EXECUTE ON FUNCTION undolog.fail(uuid, text, boolean) TO undolog_agent;
-- The same with the session first (routable by it on a distributed database).
GRANT EXECUTE ON FUNCTION undolog.commit_effect(uuid, uuid, jsonb, boolean) TO undolog_agent;
GRANT EXECUTE ON FUNCTION undolog.fail_effect(uuid, uuid, text, boolean) TO undolog_agent;
-- The tools an agent's sessions may journal: an agent registers its own; an operator may
-- register for an agent login (p_owner) and alone retires a registration.
GRANT EXECUTE ON FUNCTION undolog.register_tool(text, text, jsonb, text, text)
TO undolog_agent, undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.retire_tool(uuid, text, text) TO undolog_operator;
-- Retire a live registration that differs and register the new one, in one transaction
-- (an agent's binding would take the name back between the two).
GRANT EXECUTE ON FUNCTION undolog.replace_tool(text, text, jsonb, text, text, text, text)
TO undolog_operator;
-- What became of an approval request (who decided, when, why; whether the session goes
-- on): an agent reads its own sessions' requests, approver and operator every one.
GRANT EXECUTE ON FUNCTION undolog.approval_decision(uuid)
TO undolog_agent, undolog_approver, undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.ending_decision(uuid)
TO undolog_agent, undolog_approver, undolog_operator;
-- The arguments an approver approved instead of the requested ones: the agent runs the
-- call's body with them.
GRANT EXECUTE ON FUNCTION undolog.approval_edit(uuid, uuid)
TO undolog_agent, undolog_approver, undolog_operator;
-- A delivery's last error as the reader may read it (whole for staff; an agent's own
-- with the channel's addresses, host and URLs masked): the view notification_deliveries
-- shows it.
GRANT EXECUTE ON FUNCTION undolog.delivery_last_error(uuid, uuid)
TO undolog_agent, undolog_approver, undolog_operator;
-- What an edit changed, argument by argument (pure: from the two args the caller read).
GRANT EXECUTE ON FUNCTION undolog.edit_changes(jsonb, jsonb, integer, integer)
TO undolog_agent, undolog_approver, undolog_operator;
-- What the journal calls blank (pure): the MCP proxy, an agent login, asks it of an
-- undo's reason before a person is asked to approve an undo the journal would refuse.
GRANT EXECUTE ON FUNCTION undolog.is_blank(text) TO undolog_agent;

-- The approver: decisions on irreversible calls.
GRANT EXECUTE ON FUNCTION undolog.approve(uuid, text, text) TO undolog_approver;
GRANT EXECUTE ON FUNCTION undolog.approve_edited(uuid, text, jsonb, text) TO undolog_approver;
GRANT EXECUTE ON FUNCTION undolog.reject(uuid, text, text) TO undolog_approver;

-- The operator: the undo walk, its repairs, approval expiry and partition maintenance.
GRANT EXECUTE ON FUNCTION undolog.recover(integer) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.fail_expired_sessions(integer) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.claim_compensation(uuid, interval) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.complete_compensation(uuid, integer) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.fail_compensation(uuid, text, integer) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.resume_session(uuid, text, text) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.retry_compensation(uuid, text, text) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.abandon_session(uuid, text, text) TO undolog_operator;
-- Locks a session and refuses (UL001) when it changed since the operator read it: called
-- first in the transaction of one of the three actions above, so that a decision made on
-- a page or a `sessions show` read earlier applies to that state only.
GRANT EXECUTE ON FUNCTION undolog.expect_session(uuid, timestamptz) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.expire_approvals(integer) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.ensure_partitions(integer) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.drop_partitions(timestamptz, boolean, boolean)
TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.maintain_partitions(integer, integer) TO undolog_operator;
-- Which months are created ahead but not attached yet (`undolog health` reads it).
GRANT EXECUTE ON FUNCTION undolog.pending_partitions()
TO undolog_operator, undolog_approver;

-- A person stops a session and has its work undone: operator or approver.
GRANT EXECUTE ON FUNCTION undolog.rollback_session(uuid, text, text)
TO undolog_operator, undolog_approver;

-- Notifications of approval requests: an operator manages the channels and runs the
-- delivery worker (claim_notification hands it the channel's secret, so it is the
-- operator's alone); deliveries are read like the requests (row-level security).
GRANT EXECUTE ON FUNCTION undolog.add_notification_channel(
    text, text, text, jsonb, text, text, text
) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.remove_notification_channel(text, text) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.enqueue_notifications() TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.claim_notification(interval) TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.finish_notification(uuid, integer, text, text)
TO undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.retry_notification(uuid, text) TO undolog_operator;

-- Undo a live session down to a step and let it go on: a person, or the session's own
-- agent where the database allows it (undolog.agent_rollback_to_allowed checks that,
-- inside); and what it would undo, first.
GRANT EXECUTE ON FUNCTION undolog.rollback_to(uuid, integer, text, text)
TO undolog_operator, undolog_approver, undolog_agent;
GRANT EXECUTE ON FUNCTION undolog.rollback_last(uuid, integer, text, text)
TO undolog_operator, undolog_approver, undolog_agent;
GRANT EXECUTE ON FUNCTION undolog.rollback_to_plan(uuid, integer)
TO undolog_operator, undolog_approver, undolog_agent;
-- Which engine is installed: anyone of the engine's roles may ask.
GRANT EXECUTE ON FUNCTION undolog.version()
TO undolog_agent, undolog_approver, undolog_operator;

-- Reading the journal. Row-level security (sql/policies/) filters what each role sees:
-- an agent only its own sessions' rows. Grants and policies are on the partitioned
-- parents: the month partitions carry no grant, so naming a partition goes around
-- nothing.
GRANT SELECT ON undolog.undolog_sessions TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_session_history
TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_effect_log TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_effect_history
TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_undo_stack TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_approval_requests
TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_notification_deliveries TO undolog_approver, undolog_operator;
-- An agent's deliveries but their last_error as stored: a mail's warning names the
-- channel's recipients, staff's to read. The view notification_deliveries shows it the
-- error with every address masked (delivery_last_error).
GRANT SELECT (
    delivery_id, session_id, approval_id, channel_id, channel_name, channel_kind, state,
    attempts, max_attempts, next_attempt_at, last_attempt_at, claimed_until, created_at,
    sent_at
) ON undolog.undolog_notification_deliveries TO undolog_agent;
GRANT SELECT ON undolog.undolog_tools TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.registered_tools TO undolog_agent, undolog_approver, undolog_operator;

-- Staff-only records: the saga's undo history and operator decisions.
GRANT SELECT ON undolog.undolog_undo_history TO undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_operator_actions TO undolog_approver, undolog_operator;

-- The views (security_invoker: the reader's row-level security applies).
GRANT SELECT ON undolog.sessions_overview TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.effect_timeline TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.pending_approvals TO undolog_approver, undolog_operator;
-- The pending requests alone (ids and deadlines): the inbox's count and live refresh.
GRANT SELECT ON undolog.pending_approval_ids TO undolog_approver, undolog_operator;
GRANT SELECT ON undolog.decided_approvals TO undolog_approver, undolog_operator;
GRANT SELECT ON undolog.notification_channels TO undolog_approver, undolog_operator;
-- What a recovery worker must act on now (`undolog health` measures its lag).
GRANT SELECT ON undolog.due_sessions TO undolog_approver, undolog_operator;
-- The dashboard's views: unaggregated sessions (keyset pages), calls, undo stack,
-- approvals and state history of the sessions one may see; operator actions for staff.
GRANT SELECT ON undolog.sessions_list TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.session_calls TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undo_stack_entries TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.session_approvals TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.call_approvals TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.notification_deliveries
TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.session_state_history
TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.operator_action_log TO undolog_approver, undolog_operator;
-- The metrics views (`undolog metrics`, the dashboard's /metrics): counts over every
-- login's sessions, so staff only; an agent reads its own sessions in sessions_list.
GRANT SELECT ON
undolog.metrics_sessions,
undolog.metrics_sessions_estimated,
undolog.metrics_approvals,
undolog.metrics_approval_decisions,
undolog.metrics_calls,
undolog.metrics_compensations,
undolog.metrics_worker,
undolog.metrics_late_results
TO undolog_approver, undolog_operator;
-- metrics_sessions_estimated reads it: the statistics pg_stats hides from its readers.
GRANT EXECUTE ON FUNCTION undolog.session_state_estimates()
TO undolog_approver, undolog_operator;
-- metrics_sessions's WHERE (the one definition of an unfinished session): a view's
-- functions are called with its reader's privileges. It reads nothing.
GRANT EXECUTE ON FUNCTION undolog.session_unfinished(text, timestamptz)
TO undolog_approver, undolog_operator;

-- The runner's own records (sql/bootstrap.sql): which migrations and which repeatable
-- sources are installed, for the operator and the approver's dashboard.
-- The history chains (docs/operations/audit.md): an agent reads its own sessions' heads
-- (the links themselves are columns of the history it reads); staff verify and export
-- every chain; the operator writes anchors.
GRANT SELECT ON undolog.undolog_chain_heads TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_chain_anchors TO undolog_approver, undolog_operator;
GRANT SELECT ON undolog.chain_heads TO undolog_agent, undolog_approver, undolog_operator;
GRANT SELECT ON undolog.chain_anchors TO undolog_approver, undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.verify_chain(uuid, timestamptz, uuid, uuid)
TO undolog_approver, undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.assert_chain(uuid, timestamptz)
TO undolog_approver, undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.chain_events(uuid, timestamptz, uuid, uuid, boolean)
TO undolog_approver, undolog_operator;
GRANT EXECUTE ON FUNCTION undolog.write_anchor() TO undolog_operator;

GRANT SELECT ON undolog.undolog_migrations TO undolog_approver, undolog_operator;
GRANT SELECT ON undolog.undolog_repeatables TO undolog_approver, undolog_operator;
-- The clients' engine check (python/undolog/engine_check.py) reads, on an agent's
-- connection too, the names of the migrations applied: that column only.
GRANT SELECT (name) ON undolog.undolog_migrations TO undolog_agent;

-- The engine's owner may take advisory locks, which migration 0004_locks revokes from
-- PUBLIC in this database: its SECURITY DEFINER functions hold sessions' and call
-- signatures' locks, and `undolog migrate` holds one. Only a superuser may grant on
-- pg_catalog's functions; a database owner that is not one keeps what PUBLIC has (and
-- the statements a superuser runs instead, in docs/how-to/roles.md, grant it too).
DO $advisory$
DECLARE
    v_fn regprocedure;
    v_owner name := (SELECT pg_catalog.pg_get_userbyid(n.nspowner)
                     FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'undolog');
BEGIN
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user) THEN
        RETURN;
    END IF;
    FOR v_fn IN
        SELECT p.oid::regprocedure
        FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND p.proname ~ '^pg_(try_)?advisory_'
        ORDER BY p.oid
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I', v_fn, v_owner);
    END LOOP;
END
$advisory$;
