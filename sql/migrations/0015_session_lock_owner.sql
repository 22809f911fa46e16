-- 0015_session_lock_owner: a session's advisory lock key is its id and its owner's
-- (undolog.session_lock_key(uuid, text)), so that a login naming another's session locks
-- a key of its own. The one-argument key goes; every function that took it is applied
-- again from its source in the same migrate.
DROP FUNCTION IF EXISTS undolog.session_lock_key(uuid);
