-- Applied by every migrate run before anything else, in its transaction and under the
-- migrate advisory lock. It creates only what the migration runner itself needs;
-- everything else is a migration (sql/migrations/) or a repeatable source.
CREATE SCHEMA IF NOT EXISTS undolog;

CREATE TABLE IF NOT EXISTS undolog.undolog_migrations (
    name text PRIMARY KEY,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    applied_by text NOT NULL DEFAULT session_user
);

COMMENT ON TABLE undolog.undolog_migrations IS
'One row per applied numbered migration, written in the same transaction as the migration.';

-- The repeatable sources (functions, views, triggers, policies, grants) as last applied:
-- a row says which text (checksum of the applied SQL) this database runs, so migrate
-- re-applies a source only when its text changed (docs/how-to/upgrading.md).
CREATE TABLE IF NOT EXISTS undolog.undolog_repeatables (
    source_file text PRIMARY KEY,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    applied_by text NOT NULL DEFAULT session_user
);

COMMENT ON TABLE undolog.undolog_repeatables IS
'One row per repeatable source file (path under sql/), with the checksum of its applied text.';
