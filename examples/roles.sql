-- docs/how-to/roles.md: one login for each kind of user, run by the installing role.
-- The install created the three group roles; logins get them with GRANT. Each login is
-- created only when missing (PostgreSQL has no CREATE ROLE IF NOT EXISTS), so that a
-- second run, from another page, changes nothing; GRANT of a role held already is a no-op.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'billing_agent') THEN
        CREATE ROLE billing_agent LOGIN PASSWORD 'change-me';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'alice') THEN
        CREATE ROLE alice LOGIN PASSWORD 'change-me';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'undolog_cron') THEN
        CREATE ROLE undolog_cron LOGIN PASSWORD 'change-me';
    END IF;
END
$$;

GRANT undolog_agent TO billing_agent;       -- runs an agent: its own sessions only
GRANT undolog_approver TO alice;            -- approves or rejects; reads everything
GRANT undolog_operator TO undolog_cron;     -- the worker, partitions, halted sessions

-- max_connections is the cluster's: an agent login without a limit may take every
-- connection, and then the worker and the approvers cannot connect. Leave them room
-- (docs/how-to/roles.md#leave-the-others-a-connection).
ALTER ROLE billing_agent CONNECTION LIMIT 20;
