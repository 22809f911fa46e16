-- A session an operator must look at although its state machine is done with it:
--   needs_attention    set (never cleared by the engine) when a commit or fail arrived
--                      for a call the undo walk had already taken: its agent was paused
--                      past its lease, its body may have acted after its compensation
--                      ran, and the journal's "compensated" may not be the whole truth.
--   attention_reason   what happened, for the person (agent-supplied text is not in it).
ALTER TABLE undolog.undolog_sessions
ADD COLUMN needs_attention boolean NOT NULL DEFAULT FALSE,
ADD COLUMN attention_reason text,
ADD COLUMN attention_at timestamptz;
