-- undolog.delivery_last_error: what a delivery's last attempt failed with, or the warning
-- of a mail that some of its recipients refused, as its reader may read it: whole for
-- approvers and operators; for the agent login whose session's request it announced, with
-- every e-mail address in it as '…'; NULL for anyone else and for an unknown delivery.
-- A channel's recipients and sender are staff's (undolog.notification_channels, which no
-- agent reads), and the warning names them: who has the mail, who was refused, and the
-- server's answer, which quotes the address. The view undolog.notification_deliveries
-- shows last_error through this; an agent may not read the stored column (grants.sql).
-- Read-only; the caller is session_user, as undolog.approval_decision reads it. The
-- session first, as the delivery's key (a Citus worker holds it by its session).
CREATE OR REPLACE FUNCTION undolog.delivery_last_error(p_session_id uuid, p_delivery_id uuid)
RETURNS text
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT CASE
        WHEN pg_catalog.pg_has_role(session_user, 'undolog_approver', 'MEMBER')
             OR pg_catalog.pg_has_role(session_user, 'undolog_operator', 'MEMBER')
            THEN d.last_error
        WHEN EXISTS (SELECT FROM undolog.undolog_sessions AS s
                     WHERE s.session_id = d.session_id AND s.owner_role = session_user)
            -- an address: what is neither space nor punctuation around an "@"
            THEN pg_catalog.regexp_replace(
                d.last_error, '[^][:space:]<>(),;:"''[]+@[^][:space:]<>(),;:"''[]+', '…', 'g')
    END
    FROM undolog.undolog_notification_deliveries AS d
    WHERE d.session_id = p_session_id AND d.delivery_id = p_delivery_id
$$;

REVOKE ALL ON FUNCTION undolog.delivery_last_error(uuid, uuid) FROM public;
