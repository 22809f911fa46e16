-- The sessions table's comment, as psql's \dt+ and pg_dump show it: the baseline's named
-- a document that is not part of the repository; this one names the design page. (A
-- shipped migration is never edited: the runner refuses a changed checksum.)
COMMENT ON TABLE undolog.undolog_sessions IS
'Agent sessions: the session state machine of docs/design/state-machines.md, '
'with a lease renewed by heartbeat().';
