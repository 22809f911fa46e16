-- undolog.wake_listeners: NOTIFY p_channel (at commit, with an empty payload: see
-- approval_requests_notify), unless PostgreSQL's notification queue is fuller than the
-- database's setting undolog.notify_queue_percent (ALTER DATABASE d SET
-- undolog.notify_queue_percent = 80; 50 when unset; 0 never notifies).
-- The queue is one for the whole cluster (8 GB in PostgreSQL 15), and any login may
-- fill it: it LISTENs in a transaction it leaves open, which holds back the queue's tail,
-- and NOTIFYs in a loop (there is no privilege for either). Once it is full, every
-- transaction that notifies fails at its commit (54000): every new IRREVERSIBLE call,
-- every decision, a new notification channel and a retried delivery would be refused.
-- Every listener of the engine's channels also reads again on its own (the binding's
-- waits and the MCP proxy's holds every few seconds, the dashboard's live pages, the
-- worker every interval), so a wake-up not sent only delays what it announces.
-- Only the database-wide value counts (undolog.database_setting); a value that is not an
-- integer from 0 to 100 raises UL008 (undolog.integer_setting_value), and the caller's
-- transaction writes nothing.
CREATE OR REPLACE FUNCTION undolog.wake_listeners(p_channel text)
RETURNS void
LANGUAGE plpgsql
SET search_path = undolog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_notification_queue_usage() * 100
       < undolog.database_setting_integer('undolog.notify_queue_percent', 50, 0, 100) THEN
        PERFORM pg_catalog.pg_notify(p_channel, '');
    END IF;
END
$$;

REVOKE ALL ON FUNCTION undolog.wake_listeners(text) FROM public;
