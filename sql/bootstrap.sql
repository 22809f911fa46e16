-- Applied by every migrate run before any migration, under the migrate advisory lock.
-- It creates only what the migration runner itself needs; everything else is a migration.
CREATE SCHEMA IF NOT EXISTS undolog;

CREATE TABLE IF NOT EXISTS undolog.undolog_migrations (
    name text PRIMARY KEY,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    applied_by text NOT NULL DEFAULT session_user
);

COMMENT ON TABLE undolog.undolog_migrations IS
'One row per applied migration folder, written in the same transaction as the migration.';
