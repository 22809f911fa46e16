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

REVOKE ALL ON undolog.undolog_effect_history FROM public;
REVOKE ALL ON undolog.undolog_effect_history_default FROM public;
