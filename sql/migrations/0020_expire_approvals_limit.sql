-- 0020_expire_approvals_limit: undolog.expire_approvals takes p_limit (at most this many
-- requests expired, NULL for all of them), so that a large sweep is run in transactions
-- of a bounded size. The signature without it goes; its source, applied again in the same
-- migrate, creates the new one (a plain `SELECT undolog.expire_approvals()` still calls
-- it, with the default NULL), and grants.sql grants it again.
DROP FUNCTION IF EXISTS undolog.expire_approvals();
