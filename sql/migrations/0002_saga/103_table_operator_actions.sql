-- Append-only: every decision an operator takes on a halted session (resume, retry,
-- abandon), with who (performed_by, the human the operator function was told about) and
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

CREATE TRIGGER undolog_operator_actions_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_operator_actions
FOR EACH ROW EXECUTE FUNCTION undolog.forbid_change();

CREATE TRIGGER undolog_operator_actions_no_truncate
BEFORE TRUNCATE ON undolog.undolog_operator_actions
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();

REVOKE ALL ON undolog.undolog_operator_actions FROM public;
