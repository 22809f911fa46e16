-- 0011_hash_chain: a tamper-evident history. The append-only triggers stop every login
-- but the owner and a superuser, who can disable them; so every history row also carries
-- a SHA-256 hash chained to the previous history row of its session:
--   chain_hash = sha256(chain_prev || the row's canonical record, as UTF-8)
-- (undolog.chain_hash; the canonical record is undolog.chain_record_*), chain_seq its
-- position in the session's chain (1, 2, ...). An approval request is two links: its
-- request (chain_*) and its decision (decision_*). One chain per session, so no session's
-- writes wait for another's; its head is undolog_chain_heads, updated in the writing
-- transaction (the row lock orders a session's concurrent writers). Periodic anchors
-- (undolog_chain_anchors, undolog.write_anchor) chain the sessions' heads together, to
-- be exported where the database cannot rewrite them (docs/operations/audit.md).

CREATE TABLE undolog.undolog_chain_heads (
    session_id uuid PRIMARY KEY,
    seq bigint NOT NULL,
    prev bytea NOT NULL,
    head bytea NOT NULL
);

COMMENT ON TABLE undolog.undolog_chain_heads IS
'The last link of each session''s history chain (docs/operations/audit.md).';

-- An agent reads its own sessions' heads, staff all (sql/policies/).
ALTER TABLE undolog.undolog_chain_heads ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_chain_heads FROM public;

ALTER TABLE undolog.undolog_session_history
ADD COLUMN chain_seq bigint, ADD COLUMN chain_prev bytea, ADD COLUMN chain_hash bytea;
ALTER TABLE undolog.undolog_effect_history
ADD COLUMN chain_seq bigint, ADD COLUMN chain_prev bytea, ADD COLUMN chain_hash bytea;
ALTER TABLE undolog.undolog_undo_history
ADD COLUMN chain_seq bigint, ADD COLUMN chain_prev bytea, ADD COLUMN chain_hash bytea;
ALTER TABLE undolog.undolog_operator_actions
ADD COLUMN chain_seq bigint, ADD COLUMN chain_prev bytea, ADD COLUMN chain_hash bytea;
ALTER TABLE undolog.undolog_approval_requests
ADD COLUMN chain_seq bigint, ADD COLUMN chain_prev bytea, ADD COLUMN chain_hash bytea,
ADD COLUMN decision_seq bigint, ADD COLUMN decision_prev bytea,
ADD COLUMN decision_hash bytea;

-- The anchors: each one records the heads of the sessions whose chain moved since the
-- previous anchor, and is itself chained to that anchor. Not a journal table (no
-- session): one chain for the whole database, written by maintenance.
CREATE TABLE undolog.undolog_chain_anchors (
    anchor_id bigint PRIMARY KEY,
    written_at timestamptz NOT NULL,
    heads jsonb NOT NULL,
    prev bytea NOT NULL,
    canonical text NOT NULL,
    anchor_hash bytea NOT NULL
);

COMMENT ON TABLE undolog.undolog_chain_anchors IS
'Anchors of the history chains: sessions'' heads, chained (docs/operations/audit.md).';

ALTER TABLE undolog.undolog_chain_anchors ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_chain_anchors FROM public;

-- The head each session had at its latest anchor: the next anchor records only the
-- sessions whose head moved since.
CREATE TABLE undolog.undolog_chain_anchored (
    session_id uuid PRIMARY KEY,
    seq bigint NOT NULL
);

ALTER TABLE undolog.undolog_chain_anchored ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON undolog.undolog_chain_anchored FROM public;

-- undolog:after-repeatables
-- A month of effect history created ahead and not attached yet (pending_partitions) is a
-- plain table with the columns its parent had then: it gets the links' columns too, or
-- its ATTACH would fail.
DO $pending$
DECLARE
    v_name text;
BEGIN
    FOR v_name IN
        SELECT p.name FROM undolog.pending_partitions() AS p (name)
        WHERE p.name LIKE 'undolog\_effect\_history\_%'
    LOOP
        EXECUTE pg_catalog.format(
            'ALTER TABLE undolog.%I ADD COLUMN IF NOT EXISTS chain_seq bigint, '
            'ADD COLUMN IF NOT EXISTS chain_prev bytea, '
            'ADD COLUMN IF NOT EXISTS chain_hash bytea', v_name);
    END LOOP;
END
$pending$;

-- The rows written before this migration get their chain, session by session, in the
-- order they were written (time, then the history's own order). The append-only and
-- approval guards would refuse these UPDATEs: the owner disables its own triggers for
-- them, inside this transaction (ALTER TABLE locks each table until it commits).
DO $chain$
DECLARE
    v_table regclass;
    v_tables regclass[] := ARRAY[
        'undolog.undolog_session_history', 'undolog.undolog_effect_history',
        'undolog.undolog_undo_history', 'undolog.undolog_operator_actions',
        'undolog.undolog_approval_requests']::regclass[];
    v_event record;
    v_link record;
BEGIN
    FOR v_table IN
        SELECT t.t FROM pg_catalog.unnest(v_tables) AS t (t)
        UNION ALL
        SELECT i.inhrelid::regclass FROM pg_catalog.pg_inherits AS i
        WHERE i.inhparent = 'undolog.undolog_effect_history'::regclass
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s DISABLE TRIGGER USER', v_table);
    END LOOP;

    FOR v_event IN
        SELECT e.* FROM (
            SELECT h.session_id, h.at, 1 AS kind, h.history_id AS n, NULL::uuid AS id,
                   NULL::timestamptz AS executed_at,
                   undolog.chain_record_session_history(
                       h.session_id, h.history_id, h.from_state, h.to_state, h.at, h.actor,
                       h.detail) AS canonical
            FROM undolog.undolog_session_history AS h
            UNION ALL
            SELECT h.session_id, h.at, 2, h.history_id, NULL, h.executed_at,
                   undolog.chain_record_effect_history(
                       h.session_id, h.effect_id, h.executed_at, h.history_id, h.event,
                       h.from_state, h.to_state, h.at, h.actor, h.detail)
            FROM undolog.undolog_effect_history AS h
            UNION ALL
            SELECT h.session_id, h.at, 3, h.history_id, NULL, NULL,
                   undolog.chain_record_undo_history(
                       h.session_id, h.history_id, h.undo_id, h.event, h.from_state,
                       h.to_state, h.attempt, h.at, h.actor, h.detail)
            FROM undolog.undolog_undo_history AS h
            UNION ALL
            SELECT a.session_id, a.at, 4, a.action_id, NULL, NULL,
                   undolog.chain_record_operator_action(
                       a.session_id, a.action_id, a.action, a.undo_id, a.performed_by,
                       a.reason, a.at, a.actor)
            FROM undolog.undolog_operator_actions AS a
            UNION ALL
            SELECT a.session_id, a.requested_at, 5, 0, a.approval_id, NULL,
                   undolog.chain_record_approval_request(
                       a.session_id, a.approval_id, a.effect_id, a.executed_at,
                       a.requested_at, a.expires_at)
            FROM undolog.undolog_approval_requests AS a
            UNION ALL
            SELECT a.session_id, a.decided_at, 6, 0, a.approval_id, NULL,
                   undolog.chain_record_approval_decision(
                       a.session_id, a.approval_id, a.state, a.decided_at, a.decided_by,
                       a.reason, a.decided_role)
            FROM undolog.undolog_approval_requests AS a
            WHERE a.state <> 'pending'
        ) AS e
        ORDER BY e.session_id, e.at, e.kind, e.n, e.id
    LOOP
        SELECT l.* INTO v_link FROM undolog.chain_link(v_event.session_id, v_event.canonical) AS l;
        CASE v_event.kind
            WHEN 1 THEN
                UPDATE undolog.undolog_session_history AS h
                SET chain_seq = v_link.seq, chain_prev = v_link.prev, chain_hash = v_link.hash
                WHERE h.session_id = v_event.session_id AND h.history_id = v_event.n;
            WHEN 2 THEN
                UPDATE undolog.undolog_effect_history AS h
                SET chain_seq = v_link.seq, chain_prev = v_link.prev, chain_hash = v_link.hash
                WHERE h.session_id = v_event.session_id AND h.history_id = v_event.n
                  AND h.executed_at = v_event.executed_at;
            WHEN 3 THEN
                UPDATE undolog.undolog_undo_history AS h
                SET chain_seq = v_link.seq, chain_prev = v_link.prev, chain_hash = v_link.hash
                WHERE h.session_id = v_event.session_id AND h.history_id = v_event.n;
            WHEN 4 THEN
                UPDATE undolog.undolog_operator_actions AS a
                SET chain_seq = v_link.seq, chain_prev = v_link.prev, chain_hash = v_link.hash
                WHERE a.session_id = v_event.session_id AND a.action_id = v_event.n;
            WHEN 5 THEN
                UPDATE undolog.undolog_approval_requests AS a
                SET chain_seq = v_link.seq, chain_prev = v_link.prev, chain_hash = v_link.hash
                WHERE a.session_id = v_event.session_id AND a.approval_id = v_event.id;
            ELSE
                UPDATE undolog.undolog_approval_requests AS a
                SET decision_seq = v_link.seq, decision_prev = v_link.prev,
                    decision_hash = v_link.hash
                WHERE a.session_id = v_event.session_id AND a.approval_id = v_event.id;
        END CASE;
    END LOOP;

    FOR v_table IN
        SELECT t.t FROM pg_catalog.unnest(v_tables) AS t (t)
        UNION ALL
        SELECT i.inhrelid::regclass FROM pg_catalog.pg_inherits AS i
        WHERE i.inhparent = 'undolog.undolog_effect_history'::regclass
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE TRIGGER USER', v_table);
    END LOOP;
END
$chain$;
