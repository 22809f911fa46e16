-- undolog.delivery_last_error: what a delivery's last attempt failed with, or the warning
-- of a mail that some of its recipients refused, as its reader may read it: whole for
-- approvers and operators; for the agent login whose session's request it announced, with
-- every e-mail address in it as '…'; NULL for anyone else and for an unknown delivery.
-- A channel's recipients and sender are staff's (undolog.notification_channels, which no
-- agent reads), and the warning names them: who has the mail, who was refused, and the
-- server's answer, which quotes the address. The view undolog.notification_deliveries
-- shows last_error through this; an agent may not read the stored column (grants.sql).
-- The channel's own addresses (its recipients, its sender, its SMTP login when that is an
-- address) are masked first, as they are written, in any case, longest first: one may
-- hold what the pattern takes for punctuation ("o'brien@…", "a(team)@…",
-- "ops@[192.0.2.1]", as add_notification_channel accepts them). Then anything else
-- around an "@" (another address, or one cut off after its "@" at 2000 characters).
-- Read-only; the caller is session_user, as undolog.approval_decision reads it. The
-- session first, as the delivery's key (a Citus worker holds it by its session).
CREATE OR REPLACE FUNCTION undolog.delivery_last_error(p_session_id uuid, p_delivery_id uuid)
RETURNS text
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_error text;
    v_channel_id uuid;
    v_address text;
BEGIN
    SELECT d.last_error, d.channel_id INTO v_error, v_channel_id
    FROM undolog.undolog_notification_deliveries AS d
    WHERE d.session_id = p_session_id AND d.delivery_id = p_delivery_id;
    IF undolog.caller_is_staff() THEN
        RETURN v_error;
    END IF;
    IF v_error IS NULL OR NOT EXISTS (
        SELECT FROM undolog.undolog_sessions AS s
        WHERE s.session_id = p_session_id AND s.owner_role = session_user
    ) THEN
        RETURN NULL;
    END IF;
    FOR v_address IN
        SELECT a.address
        FROM undolog.undolog_notification_channels AS c,
            LATERAL (
                SELECT pg_catalog.btrim(r.x) AS address
                FROM pg_catalog.unnest(pg_catalog.string_to_array(c.destination, ',')) AS r (x)
                UNION ALL SELECT c.config ->> 'smtp_from'
                UNION ALL SELECT c.config ->> 'smtp_user'
            ) AS a
        WHERE c.channel_id = v_channel_id AND c.kind = 'email' AND a.address LIKE '%@%'
        ORDER BY pg_catalog.length(a.address) DESC
    LOOP
        -- '***=': the rest of the pattern is literal; 'i': in any case, as a server
        -- may echo it
        v_error := pg_catalog.regexp_replace(v_error, '***=' || v_address, '…', 'gi');
    END LOOP;
    -- an address: what is neither space nor punctuation around an "@"
    RETURN pg_catalog.regexp_replace(
        v_error, '[^][:space:]<>(),;:"''[]+@[^][:space:]<>(),;:"''[]*', '…', 'g'
    );
END
$$;

REVOKE ALL ON FUNCTION undolog.delivery_last_error(uuid, uuid) FROM public;
