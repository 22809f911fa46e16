-- The exactly-once guard. A unique index on the partitioned effect log would have to
-- contain executed_at, so uniqueness of call_signature lives here, in a plain table that
-- intercept inserts into with ON CONFLICT DO NOTHING. It also maps a signature or an
-- effect id to the effect's partition key.
CREATE TABLE undolog.undolog_signature_registry (
    session_id uuid NOT NULL,
    call_signature text NOT NULL,
    effect_id uuid NOT NULL,
    executed_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, call_signature)
);
-- The signature's form (64 lowercase hex) is checked by intercept before it writes here,
-- and only the owner writes this table; a CHECK would cost a regex per call (~14 us).

-- Unique across the whole journal, whatever the session: the signature's preimage holds
-- the session id, so only a lying client could send one signature under two sessions.
CREATE UNIQUE INDEX undolog_signature_registry_signature_key
ON undolog.undolog_signature_registry (call_signature);

-- commit/fail address an effect by id alone.
CREATE UNIQUE INDEX undolog_signature_registry_effect_key
ON undolog.undolog_signature_registry (effect_id, session_id);

-- Once per statement, not per row: it refuses every UPDATE and DELETE just as surely
-- (before any row changes), and retention's bypassed DELETE of a month of registry rows
-- then costs one trigger call, not one per row (500 000 rows: 0.3 s instead of 1.0 s).
CREATE TRIGGER undolog_signature_registry_append_only
BEFORE UPDATE OR DELETE ON undolog.undolog_signature_registry
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();

CREATE TRIGGER undolog_signature_registry_no_truncate
BEFORE TRUNCATE ON undolog.undolog_signature_registry
FOR EACH STATEMENT EXECUTE FUNCTION undolog.forbid_change();

REVOKE ALL ON undolog.undolog_signature_registry FROM public;
