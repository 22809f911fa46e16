-- docs/reference/sql.md: one session with one compensable call, driven from SQL alone.
-- psql -v ON_ERROR_STOP=1 -f examples/session.sql
-- The session id is fixed so that the signature below is the real one: run it on a
-- fresh database (a second run finds the session already compensated).
\set sid '6f1c2a9e-5d3b-4c1a-9e8f-0a1b2c3d4e5f'
-- call_signature(sid, 0, 'create_user', {"email": "ada@example.com"}), from Python:
\set sig 'a343cbab49d6aae803f90c6e02aa5d1cba92918b67fbd036a0ed4be7a0c5b08f'

-- the agent (undolog_agent): its tool, registered once (the engine refuses calls of
-- unregistered tools and takes the compensation from here), a session, and a call
-- written down before it runs
SELECT undolog.register_tool('create_user', 'compensable', '{"name": "delete_user"}');
SELECT undolog.begin_session(:'sid', 'sql-agent');
SELECT effect_id, action FROM undolog.intercept(
    :'sid', 0, 'create_user', 'compensable', '{"email": "ada@example.com"}', :'sig',
    '{"name": "delete_user", "args": {}}'
) \gset
-- action = execute: run the tool now, then record its result
SELECT undolog.commit(:'effect_id', '{"user_id": 7}');

-- the same call again (a restarted agent) is a replay: the cached result, nothing runs
SELECT action, result_snapshot FROM undolog.intercept(
    :'sid', 0, 'create_user', 'compensable', '{"email": "ada@example.com"}', :'sig',
    '{"name": "delete_user", "args": {}}'
);

-- the agent gives up: the session fails and must be undone
SELECT undolog.fail_session(:'sid', 'the agent gave up');

-- the walker (undolog_operator): claim the top entry, run it, report it
SELECT undo_id, compensation, result_snapshot, attempt
FROM undolog.claim_compensation(:'sid') \gset
-- here: delete user 7, with :undo_id as the idempotency key
SELECT undolog.complete_compensation(:'undo_id', :attempt);
-- nothing left: this claim answers no row and the session is compensated
SELECT * FROM undolog.claim_compensation(:'sid');
SELECT state, calls, undone_calls FROM undolog.sessions_overview WHERE session_id = :'sid';
