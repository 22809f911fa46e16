-- docs: the engine's settings are ordinary PostgreSQL settings of the database.
-- Run with psql, which fills in :"DBNAME" (the database you are connected to):
--   psql -v ON_ERROR_STOP=1 -f examples/settings.sql
-- A value the engine cannot read is refused (UL008). The deadline, the two bounds, the
-- agents' undo and the NOTIFY threshold are read from the database's own setting at each
-- use: a new value counts at once, and a login's own SET changes nothing. The others are
-- read as the connection's settings: new connections see a new value (restart the worker).

-- --8<-- [start:approval_timeout]
-- every new approval request must be decided within 4 hours (unset: no deadline)
ALTER DATABASE :"DBNAME" SET undolog.approval_timeout = '4 hours';
-- --8<-- [end:approval_timeout]

-- --8<-- [start:max_pending_approvals]
-- the sessions of one login may have 500 approval requests pending at once (default 100)
ALTER DATABASE :"DBNAME" SET undolog.max_pending_approvals = 500;
-- --8<-- [end:max_pending_approvals]

-- --8<-- [start:max_live_sessions]
-- one login may have 200,000 sessions unfinished at once (default 100,000)
ALTER DATABASE :"DBNAME" SET undolog.max_live_sessions = 200000;
-- --8<-- [end:max_live_sessions]

-- --8<-- [start:agent_rollback_to]
-- an agent login may not undo its own sessions to a point (the default; on lets it)
ALTER DATABASE :"DBNAME" SET undolog.agent_rollback_to = off;
-- --8<-- [end:agent_rollback_to]

-- --8<-- [start:notify_queue_percent]
-- the engine stops its NOTIFYs once the notification queue is 80% full (default 50)
ALTER DATABASE :"DBNAME" SET undolog.notify_queue_percent = 80;
-- --8<-- [end:notify_queue_percent]

-- --8<-- [start:walk]
-- a compensation is tried 8 times before its session halts (default 5) ...
ALTER DATABASE :"DBNAME" SET undolog.default_max_attempts = 8;
-- ... waiting 2 s, 4 s, 8 s ... between attempts, never more than 10 minutes
ALTER DATABASE :"DBNAME" SET undolog.retry_base = '2 seconds';
ALTER DATABASE :"DBNAME" SET undolog.retry_cap = '10 minutes';
-- a walker that claimed a compensation and died loses it after 5 minutes (the default)
ALTER DATABASE :"DBNAME" SET undolog.claim_timeout = '5 minutes';
-- --8<-- [end:walk]

-- --8<-- [start:retention]
-- month partitions older than 24 months go at the next maintenance (default 12)
ALTER DATABASE :"DBNAME" SET undolog.retention_months = 24;
-- --8<-- [end:retention]

-- --8<-- [start:notifications]
-- a notification of an approval request is tried 12 times before it is failed (default 8),
-- waiting 30 s, 60 s, 120 s ... between attempts, never more than 2 hours
ALTER DATABASE :"DBNAME" SET undolog.notification_max_attempts = 12;
ALTER DATABASE :"DBNAME" SET undolog.notification_retry_base = '30 seconds';
ALTER DATABASE :"DBNAME" SET undolog.notification_retry_cap = '2 hours';
-- --8<-- [end:notifications]
