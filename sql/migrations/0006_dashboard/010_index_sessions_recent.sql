-- The dashboard's sessions list pages newest first with a keyset (created_at,
-- session_id) < (last seen), optionally filtered by state: each page is one short index
-- range, whatever the number of sessions (a million: bench/bench_dashboard.py).
CREATE INDEX undolog_sessions_recent_idx
ON undolog.undolog_sessions (created_at DESC, session_id DESC);

CREATE INDEX undolog_sessions_state_recent_idx
ON undolog.undolog_sessions (state, created_at DESC, session_id DESC);
