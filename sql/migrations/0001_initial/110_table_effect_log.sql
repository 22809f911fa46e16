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
    PRIMARY KEY (session_id, effect_id, executed_at)
) PARTITION BY RANGE (executed_at);
-- No CHECK constraints on tier and state: the guard trigger (effect_log_guard) admits
-- only a valid tier and a starting state on INSERT and only the transitions of
-- effect_transition_allowed on UPDATE, and a CHECK is recompiled for every statement
-- that writes a row (~27 us per call, bench/bench_intercept.py).

-- Catches any write whose month has no partition yet, so no write is ever lost;
-- ensure_partitions() creates months ahead of time.
CREATE TABLE undolog.undolog_effect_log_default
PARTITION OF undolog.undolog_effect_log DEFAULT;

COMMENT ON TABLE undolog.undolog_effect_log IS
'The effect journal: one row per journaled tool call, partitioned by month on executed_at.';

REVOKE ALL ON undolog.undolog_effect_log FROM public;
REVOKE ALL ON undolog.undolog_effect_log_default FROM public;
