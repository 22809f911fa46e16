-- undolog_sessions.owner_role: the login role that began the session. Row-level security
-- lets an agent read only the sessions (and their effects, history, undo entries and
-- approvals) that its own login began.
-- session_user, not current_user: begin_session is SECURITY DEFINER, so current_user is
-- the engine's owner there, while session_user stays the role that logged in (SET ROLE
-- does not change it either). Sessions that exist before this migration get the
-- installer's role (the default is evaluated once for them).
ALTER TABLE undolog.undolog_sessions
ADD COLUMN owner_role text NOT NULL DEFAULT session_user;

COMMENT ON COLUMN undolog.undolog_sessions.owner_role IS
'The login role (session_user) that began the session; an agent reads only its own sessions.';
