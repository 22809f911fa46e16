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

CREATE TRIGGER undolog_undo_history_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_undo_history
FOR EACH ROW EXECUTE FUNCTION undolog.forbid_change();

CREATE TRIGGER undolog_undo_history_no_truncate
BEFORE TRUNCATE ON undolog.undolog_undo_history
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();

REVOKE ALL ON undolog.undolog_undo_history FROM public;
