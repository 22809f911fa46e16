-- docs/how-to/roles.md: one login for each kind of user, run by the installing role.
-- The install created the three group roles; logins get them with GRANT.
CREATE ROLE billing_agent LOGIN PASSWORD 'change-me';
GRANT undolog_agent TO billing_agent;       -- runs an agent: its own sessions only

CREATE ROLE alice LOGIN PASSWORD 'change-me';
GRANT undolog_approver TO alice;            -- approves or rejects; reads everything

CREATE ROLE undolog_cron LOGIN PASSWORD 'change-me';
GRANT undolog_operator TO undolog_cron;     -- the worker, partitions, halted sessions
