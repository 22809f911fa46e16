-- docs/operations/monitoring.md: queries to alert on. Each answers rows (or a count)
-- that should be zero on a healthy system. Run as an operator or approver login, but the
-- partitions' counts: they read the default partitions themselves, which only the
-- engine's owner may (an operator sees their estimated rows in `undolog partitions list`
-- and on the dashboard's Maintenance page).
-- The sessions are read from undolog.sessions_list, one row a session: the state's index
-- finds the few live ones; sessions_overview would count each one's calls first.

-- --8<-- [start:halted]
-- sessions that wait for a person (a compensation failed for good, or an irreversible
-- call stopped the walk) and that nobody has resolved yet
SELECT session_id, agent, updated_at, error
FROM undolog.sessions_list
WHERE state = 'halted' AND resolved_at IS NULL;
-- --8<-- [end:halted]

-- --8<-- [start:worker_lag]
-- dead agents the worker has not picked up: their lease ran out a minute ago or more
SELECT count(*) AS expired_leases
FROM undolog.sessions_list
WHERE state = 'active' AND lease_expires_at < now() - interval '1 minute';

-- walks that do not finish: failed or compensating for over 15 minutes
SELECT count(*) AS stuck_walks
FROM undolog.sessions_list
WHERE state IN ('failed', 'compensating') AND updated_at < now() - interval '15 minutes';
-- --8<-- [end:worker_lag]

-- --8<-- [start:approvals]
-- calls that have waited for an approver for over an hour
SELECT approval_id, tool_name, agent, age
FROM undolog.pending_approvals
WHERE age > interval '1 hour';
-- --8<-- [end:approvals]

-- --8<-- [start:partitions]
-- rows that landed in a default partition (a month that did not exist yet): the next
-- maintenance moves them, but it should have created the month ahead of time
SELECT
    (SELECT count(*) FROM undolog.undolog_effect_log_default) AS effects_in_default,
    (SELECT count(*) FROM undolog.undolog_effect_history_default) AS history_in_default;

-- next month's partition must exist
SELECT to_regclass(
    'undolog.undolog_effect_log_' || to_char(now() AT TIME ZONE 'UTC' + interval '1 month', 'YYYY_MM')
) IS NOT NULL AS next_month_exists;
-- --8<-- [end:partitions]
