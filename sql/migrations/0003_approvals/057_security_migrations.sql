-- Read access to undolog.undolog_migrations (created by bootstrap.sql): which engine
-- version is installed, for the operator and the approver's dashboard.
REVOKE ALL ON undolog.undolog_migrations FROM public;
GRANT SELECT ON undolog.undolog_migrations TO undolog_approver, undolog_operator;
