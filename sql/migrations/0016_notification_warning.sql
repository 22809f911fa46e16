-- 0016_notification_warning: undolog.finish_notification takes a fourth argument,
-- p_warning (DEFAULT NULL): what a sent attempt did not reach, such as an e-mail's
-- recipients that the SMTP server refused while it took the mail for the others. The
-- three-argument form goes (a call naming three arguments would otherwise match both);
-- its source applies the four-argument one in the same migrate, and grants.sql grants it.
DROP FUNCTION IF EXISTS undolog.finish_notification(uuid, integer, text);
