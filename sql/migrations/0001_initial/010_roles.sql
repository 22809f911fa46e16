-- Group roles (NOLOGIN). Roles are cluster-wide, so an install into a second database
-- finds them already there. Grant them to login roles: GRANT undolog_agent TO my_app;
DO $roles$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['undolog_agent', 'undolog_approver', 'undolog_operator'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
        END IF;
    END LOOP;
END
$roles$;

REVOKE ALL ON SCHEMA undolog FROM public;
GRANT USAGE ON SCHEMA undolog TO undolog_agent, undolog_approver, undolog_operator;

-- Functions are executable by PUBLIC by default; every function file also revokes
-- explicitly, this catches any we forget.
ALTER DEFAULT PRIVILEGES IN SCHEMA undolog REVOKE EXECUTE ON FUNCTIONS FROM public;
