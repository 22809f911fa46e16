-- 0018_signature_lock_per_session: a call's advisory lock key is its session's id and its
-- signature (undolog.signature_lock_key(uuid, text)), taken once the caller is known to be
-- the session's owner, so that no other login holds a call's key to keep it in_progress.
-- The one-argument key goes; journal_call, which took it, is applied again from its
-- source in the same migrate.
DROP FUNCTION IF EXISTS undolog.signature_lock_key(text);
