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

CREATE TRIGGER undolog_session_history_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_session_history
FOR EACH ROW EXECUTE FUNCTION undolog.forbid_change();

CREATE TRIGGER undolog_session_history_no_truncate
BEFORE TRUNCATE ON undolog.undolog_session_history
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();

REVOKE ALL ON undolog.undolog_session_history FROM public;
