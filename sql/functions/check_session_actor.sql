-- undolog.check_session_actor: who may move a session at all: its owner, or an approver
-- or operator. transition_session checks it for every move, whoever asked for it: the
-- agent's own moves (fail_session, complete_session) are narrowed to the owner by
-- check_session_caller first, and the people's moves come only through approve/reject
-- and the recorded operator functions. begin_session answers another login's existing
-- session unchanged to the same people. 42501 for anyone else.
CREATE OR REPLACE FUNCTION undolog.check_session_actor(p_session_id uuid, p_owner_role text)
RETURNS void
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF p_owner_role IS DISTINCT FROM session_user AND NOT undolog.caller_is_staff() THEN
        RAISE EXCEPTION USING
            ERRCODE = '42501',
            MESSAGE = pg_catalog.format('session %s belongs to another role', p_session_id),
            HINT = 'An agent acts only on the sessions its own login began. If your login never '
                   'began this id, another login began it first: begin with a new random id '
                   '(leave the id out, or a UUID version 4), never one others can guess.';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.check_session_actor(uuid, text) FROM public;
