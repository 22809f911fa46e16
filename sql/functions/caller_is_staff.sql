-- undolog.caller_is_staff: whether the login (session_user, whoever's rights the calling
-- function runs with) is a person of the staff: a member of undolog_approver or of
-- undolog_operator. Staff may read and act on every login's sessions; an agent only on
-- its own. The one statement of that rule for the functions that decide by it.
-- Plain SQL with no SET clause, so that the planner inlines it in a query's WHERE.
CREATE OR REPLACE FUNCTION undolog.caller_is_staff()
RETURNS boolean
LANGUAGE sql
STABLE
AS $$
    SELECT pg_catalog.pg_has_role(session_user, 'undolog_approver', 'MEMBER')
           OR pg_catalog.pg_has_role(session_user, 'undolog_operator', 'MEMBER')
$$;

REVOKE ALL ON FUNCTION undolog.caller_is_staff() FROM public;
