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
-- A channel's host is staff's too (the view shows an operator a webhook's scheme and
-- host): the text stores what an operator acts on, a URL as its scheme and host and the
-- host as a receiver or a TLS error names it, and the agent reads each as '…' (the row's
-- channel_name and channel_id say which channel failed). After the channel's addresses
-- (an address's domain may be the SMTP server's name, and masked first it would leave
-- "a(team)@…"), the channel's host (a webhook's authority and host name, a mail
-- channel's SMTP server) as written, in any case, where it is not part of a longer name;
-- then any URL whole, whatever its host; then any other address.
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
    v_host text;
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
        -- may echo it. Written '…@…', so that what a longer address held around it
        -- ("jim" of jimbob@…) goes with it in the last step
        v_error := pg_catalog.regexp_replace(v_error, '***=' || v_address, '…@…', 'gi');
    END LOOP;
    FOR v_host IN
        SELECT h.host
        FROM undolog.undolog_notification_channels AS c,
            LATERAL (
                SELECT CASE c.kind
                    WHEN 'webhook' THEN pg_catalog.substring(
                        c.destination, '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#@]*@)?([^/?#]*)'
                    )
                    ELSE c.config ->> 'smtp_host'
                END AS authority
            ) AS a,
            LATERAL (
                SELECT a.authority
                UNION ALL SELECT pg_catalog.regexp_replace(a.authority, ':[0-9]*$', '')
                -- an IPv6 address without its brackets, as a TLS error names it
                UNION ALL SELECT pg_catalog.btrim(
                    pg_catalog.regexp_replace(a.authority, ':[0-9]*$', ''), '[]'
                )
            ) AS h (host)
        WHERE c.channel_id = v_channel_id AND h.host <> ''
        ORDER BY pg_catalog.length(h.host) DESC
    LOOP
        -- the host literal (each character but a letter or a digit escaped),
        -- where no letter, digit or hyphen of a longer host name is next to it (a
        -- longer dotted name that holds it keeps only its own labels, "sub.…": the
        -- channel's part of it masked, rather than the whole name shown)
        v_error := pg_catalog.regexp_replace(
            v_error,
            '(?<![[:alnum:]-])'
            || pg_catalog.regexp_replace(v_host, '([^[:alnum:]])', '\\\1', 'g')
            || '(?![[:alnum:]-])',
            '…', 'gi'
        );
    END LOOP;
    -- a URL: its scheme, then everything up to a space, a quote or an angle bracket
    v_error := pg_catalog.regexp_replace(
        v_error, '[A-Za-z][A-Za-z0-9+.-]*://[^[:space:]''"<>]*', '…', 'g'
    );
    -- an address: what is neither space nor punctuation around an "@"
    RETURN pg_catalog.regexp_replace(
        v_error, '[^][:space:]<>(),;:"''[]+@[^][:space:]<>(),;:"''[]*', '…', 'g'
    );
END
$$;

REVOKE ALL ON FUNCTION undolog.delivery_last_error(uuid, uuid) FROM public;
