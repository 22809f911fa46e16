-- undolog.retention_months(p_months): months of journal kept by maintain_partitions. The
-- argument, else the setting undolog.retention_months, else 12; from 1 to 1200, UL008
-- otherwise.
BEGIN;
SELECT plan(16);

SELECT has_function('undolog', 'retention_months', ARRAY['integer'],
                    'undolog.retention_months(integer) exists');
SELECT is(undolog.retention_months(), 12, 'no argument, no setting: 12');
SET LOCAL undolog.retention_months = '';
SELECT is(undolog.retention_months(), 12, 'empty setting: 12');
SET LOCAL undolog.retention_months = '24';
SELECT is(undolog.retention_months(), 24, 'setting 24: 24');
SELECT is(undolog.retention_months(6), 6, 'the argument wins over the setting');
SET LOCAL undolog.retention_months = ' 18 ';
SELECT is(undolog.retention_months(), 18, 'the setting is trimmed');
SELECT is(undolog.retention_months(1), 1, 'argument 1: 1 (the least)');
SELECT is(undolog.retention_months(1200), 1200, 'argument 1200: 1200 (the most)');

SELECT throws_ok($$SELECT undolog.retention_months(0)$$, 'UL008',
                 'retention must be between 1 and 1200 months, not 0', 'argument 0: UL008');
SELECT throws_ok($$SELECT undolog.retention_months(1201)$$, 'UL008', NULL, 'argument 1201: UL008');
SELECT throws_ok($$SELECT undolog.retention_months(-1)$$, 'UL008', NULL, 'argument -1: UL008');
SET LOCAL undolog.retention_months = 'twelve';
SELECT throws_ok($$SELECT undolog.retention_months()$$, 'UL008',
                 'undolog.retention_months must be an integer from 1 to 1200, not ''twelve''',
                 'setting ''twelve'': UL008 naming it');
SELECT is(undolog.retention_months(3), 3, 'a bad setting does not matter when the argument is given');
SET LOCAL undolog.retention_months = '1.5';
SELECT throws_ok($$SELECT undolog.retention_months()$$, 'UL008', NULL, 'setting 1.5: UL008');
SET LOCAL undolog.retention_months = '0';
SELECT throws_ok($$SELECT undolog.retention_months()$$, 'UL008', NULL, 'setting 0: UL008');
SET LOCAL undolog.retention_months = '-2';
SELECT throws_ok($$SELECT undolog.retention_months()$$, 'UL008', NULL, 'setting -2: UL008');

SELECT * FROM finish();
ROLLBACK;
