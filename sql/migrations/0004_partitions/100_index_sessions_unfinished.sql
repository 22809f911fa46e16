-- The sessions that hold their months against retention (undolog.unfinished_sessions):
-- few at any time, however many finished sessions the journal has kept over the years.
CREATE INDEX IF NOT EXISTS undolog_sessions_unfinished_idx
ON undolog.undolog_sessions (session_id)
WHERE state NOT IN ('completed', 'compensated') AND resolved_at IS NULL;
