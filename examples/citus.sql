-- docs/citus.md: the plan for distributing the journal by session on Citus, run on the
-- coordinator after `undolog migrate`. Citus is not installable where this was built: a
-- test checks that every table and function named here exists and that every journal
-- table is named, not that Citus accepts it.

-- --8<-- [start:tables]
SELECT create_distributed_table('undolog.undolog_sessions', 'session_id');
SELECT create_distributed_table('undolog.undolog_session_history', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_table('undolog.undolog_effect_log', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_table('undolog.undolog_effect_history', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');
-- A call's undo entry holds its exactly-once key: the unique index (session_id,
-- call_signature) leads with the distribution column, so each shard enforces it alone.
SELECT create_distributed_table('undolog.undolog_undo_stack', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_table('undolog.undolog_undo_history', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_table('undolog.undolog_operator_actions', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_table('undolog.undolog_approval_requests', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_table('undolog.undolog_notification_deliveries', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');

-- The tool registry has no session: every worker reads it (intercept checks a new call
-- against its tool's registration there, intercept_tool finds it by id), so it is a
-- reference table.
SELECT create_reference_table('undolog.undolog_tools');
SELECT create_distributed_table('undolog.undolog_chain_heads', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_table('undolog.undolog_chain_anchored', 'session_id',
                                colocate_with => 'undolog.undolog_sessions');
-- --8<-- [end:tables]

-- --8<-- [start:functions]
SELECT create_distributed_function('undolog.begin_session(uuid, text, jsonb, interval)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_function('undolog.heartbeat(uuid)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_function(
    'undolog.intercept(uuid, integer, text, text, jsonb, text, jsonb)',
    '$1', colocate_with => 'undolog.undolog_sessions');
-- The binding's: the tool named by its registration (a reference table's row).
SELECT create_distributed_function(
    'undolog.intercept_tool(uuid, uuid, integer, jsonb, text)',
    '$1', colocate_with => 'undolog.undolog_sessions');
-- A call's result, with the session first, as the binding sends it.
SELECT create_distributed_function('undolog.commit_effect(uuid, uuid, jsonb, boolean)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_function('undolog.fail_effect(uuid, uuid, text, boolean)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_function('undolog.complete_session(uuid)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_function('undolog.fail_session(uuid, text)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_function('undolog.claim_compensation(uuid, interval)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_function('undolog.resume_session(uuid, text, text)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_function('undolog.abandon_session(uuid, text, text)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
SELECT create_distributed_function('undolog.rollback_session(uuid, text, text)',
                                   '$1', colocate_with => 'undolog.undolog_sessions');
-- --8<-- [end:functions]
