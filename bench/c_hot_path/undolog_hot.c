/*
 * undolog_hot.c: what a new COMPENSABLE call would cost in C (issue 23), a benchmark's
 * prototype, not part of the product. Two functions over bench_plain_sql.py's one-row
 * live-call table (undolog.plain_live_calls), beside the shipped engine whose sessions,
 * tool registry and chain heads they read and move:
 *
 *   undolog.c_intercept(session, tool_id, step, args, signature)
 *       -> (effect_id, action, result_snapshot)
 *   undolog.c_commit(session, effect_id, result, async) -> 'committed'
 *
 * and the same checks with the tables read and written through SPI (c_intercept_spi,
 * c_commit_spi, at the end), as a second data point.
 *
 * Both reach the tables through the heap and index access methods (system-table scans
 * of the key indexes, heap_form_tuple, simple_heap_insert, heap_update, index entries by
 * ExecInsertIndexTuples with a minimal EState): no SPI, no planner, no executor plan.
 * Nothing they touch is checked by PostgreSQL's privileges or row-level security, so
 * what an agent may do is exactly what is checked here. What is checked and what is
 * not is listed in bench/bench_c_hot_path.py's docstring and docs/performance-log.md
 * ("A C hot path").
 *
 * Built at run time by bench/bench_c_hot_path.py (gcc, pg_config's flags); the .so is
 * never committed. PostgreSQL 15.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "commands/sequence.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/varlena.h"

PG_MODULE_MAGIC;

/* The project's SQLSTATEs (docs/reference/errors.md). */
#define UNDOLOG_SQLSTATE(c3, c4, c5) MAKE_SQLSTATE('U', 'L', c3, c4, c5)
#define ERRCODE_UL001 UNDOLOG_SQLSTATE('0', '0', '1')	/* InvalidStateTransition */
#define ERRCODE_UL002 UNDOLOG_SQLSTATE('0', '0', '2')	/* UnknownSession */
#define ERRCODE_UL003 UNDOLOG_SQLSTATE('0', '0', '3')	/* UnknownEffect */
#define ERRCODE_UL004 UNDOLOG_SQLSTATE('0', '0', '4')	/* MalformedSignature */
#define ERRCODE_UL005 UNDOLOG_SQLSTATE('0', '0', '5')	/* SignatureMismatch */
#define ERRCODE_UL008 UNDOLOG_SQLSTATE('0', '0', '8')	/* InvalidArgument */
#define ERRCODE_UL010 UNDOLOG_SQLSTATE('0', '1', '0')	/* SessionNotActive */
#define ERRCODE_UL017 UNDOLOG_SQLSTATE('0', '1', '7')	/* UnknownTool */

PG_FUNCTION_INFO_V1(undolog_c_intercept);
PG_FUNCTION_INFO_V1(undolog_c_commit);

/* --- the tables, resolved once per backend, again after an ALTER ---------------------- */

/* The live-call table's columns, in bench_plain_sql.py's PLAIN_SQL order. */
enum
{
	C_SESSION_ID, C_CALL_SIGNATURE, C_EFFECT_ID, C_EXECUTED_AT, C_STACK_POSITION,
	C_STEP_INDEX, C_TOOL_ID, C_TOOL_NAME, C_TIER, C_ARGS, C_COMPENSATION,
	C_INTERCEPTED_BY, C_STATE, C_UNDO_STATE, C_RESULT_SNAPSHOT, C_COMMITTED_AT,
	C_COMMITTED_BY, C_COMMIT_SEQ, C_COMMIT_PREV, C_COMMIT_HASH, C_NCOLS
};
static const char *const call_columns[C_NCOLS] = {
	"session_id", "call_signature", "effect_id", "executed_at", "stack_position",
	"step_index", "tool_id", "tool_name", "tier", "args", "compensation",
	"intercepted_by", "state", "undo_state", "result_snapshot", "committed_at",
	"committed_by", "commit_seq", "commit_prev", "commit_hash"
};

typedef struct HotCatalog
{
	bool		ready;
	Oid			calls;			/* undolog.plain_live_calls */
	Oid			calls_key;		/* its primary key (session_id, call_signature) */
	Oid			calls_effect;	/* (effect_id, session_id) */
	Oid			stack_seq;		/* stack_position's identity sequence */
	AttrNumber	call_att[C_NCOLS];
	Oid			sessions;
	Oid			sessions_pkey;
	AttrNumber	s_session_id, s_owner_role, s_state;
	Oid			tools;
	Oid			tools_pkey;
	AttrNumber	t_tool_id, t_owner_role, t_tool_name, t_tier, t_compensation, t_retired_at;
	Oid			heads;
	Oid			heads_pkey;
	AttrNumber	h_session_id, h_seq, h_prev, h_head;
	Oid			engine_owner;	/* whose rights the engine's SECURITY DEFINER functions run with */
	Oid			payload_fits;	/* undolog.payload_fits(jsonb): values off the fast path */
	Oid			check_payload;	/* undolog.check_payload(text, jsonb): names the refusal */
	Datum		max_double;		/* numeric bounds of numbers_fit */
	Datum		min_double;
	Datum		zero;
	Oid			user_oid;		/* session_user, as a name */
	char	   *user_name;
} HotCatalog;

static HotCatalog cat;

/*
 * A change to one of the tables (ALTER TABLE: a column added, dropped or renamed, a
 * trigger; DROP) invalidates its relcache entry, and this forgets the layout read from
 * it: rows are read into and written from arrays of C_NCOLS by the column numbers
 * cached here, so a stale layout would read and write past their end.
 */
static void
forget_catalog(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == cat.calls || relid == cat.sessions ||
		relid == cat.tools || relid == cat.heads)
		cat.ready = false;
}

/*
 * The four tables, locked (AccessShareLock) until the transaction ends, so that none
 * changes under the layout read from them; taking a lock takes in the invalidations of
 * what changed since (forget_catalog).
 */
static void
lock_tables(void)
{
	LockRelationOid(cat.calls, AccessShareLock);
	LockRelationOid(cat.sessions, AccessShareLock);
	LockRelationOid(cat.tools, AccessShareLock);
	LockRelationOid(cat.heads, AccessShareLock);
}

static Oid
relation_in(Oid nsp, const char *name)
{
	Oid			oid = get_relname_relid(name, nsp);

	if (!OidIsValid(oid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("undolog.%s does not exist", name),
				 errhint("Install the engine and bench_plain_sql.py's PLAIN_SQL first.")));
	return oid;
}

static AttrNumber
column_of(Oid rel, const char *name)
{
	AttrNumber	att = get_attnum(rel, name);

	if (att == InvalidAttrNumber)
		elog(ERROR, "column %s of relation %u not found", name, rel);
	return att;
}

/*
 * The shortcuts below skip what the executor would do for these tables beyond their
 * indexes: triggers, CHECK constraints, generated columns. Refuse to run on tables
 * that have any, rather than skip them silently.
 */
static void
require_plain(Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	TupleConstr *constr = RelationGetDescr(rel)->constr;

	if (rel->trigdesc != NULL || (constr != NULL && (constr->num_check > 0 ||
													 constr->has_generated_stored)))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s has triggers, CHECK constraints or generated columns",
						RelationGetRelationName(rel)),
				 errhint("The C hot path writes rows without them: use the table as "
						 "PLAIN_SQL makes it (checks in the policies).")));
	table_close(rel, NoLock);
}

static Oid
function_oid(const char *name, int nargs, Oid *argtypes)
{
	return LookupFuncName(textToQualifiedNameList(cstring_to_text(name)), nargs, argtypes, false);
}

static void
ensure_catalog(void)
{
	Oid			nsp;
	MemoryContext old;
	Oid			check_args[2] = {TEXTOID, JSONBOID};
	Oid			fits_args[1] = {JSONBOID};
	static bool callback_registered = false;

	if (cat.ready)
	{
		/* Still so once the tables are locked in this transaction: read them again. */
		lock_tables();
		if (cat.ready)
			return;
	}
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(forget_catalog, (Datum) 0);
		callback_registered = true;
	}
	nsp = get_namespace_oid("undolog", false);
	cat.calls = relation_in(nsp, "plain_live_calls");
	cat.sessions = relation_in(nsp, "undolog_sessions");
	cat.tools = relation_in(nsp, "undolog_tools");
	cat.heads = relation_in(nsp, "undolog_chain_heads");
	/* Locked before their columns are read: no ALTER commits in between. */
	lock_tables();
	cat.calls_key = relation_in(nsp, "plain_live_calls_pkey");
	cat.calls_effect = relation_in(nsp, "plain_live_calls_effect_key");
	for (int i = 0; i < C_NCOLS; i++)
		cat.call_att[i] = column_of(cat.calls, call_columns[i]);
	cat.stack_seq = getIdentitySequence(cat.calls, cat.call_att[C_STACK_POSITION], false);
	cat.sessions_pkey = relation_in(nsp, "undolog_sessions_pkey");
	cat.s_session_id = column_of(cat.sessions, "session_id");
	cat.s_owner_role = column_of(cat.sessions, "owner_role");
	cat.s_state = column_of(cat.sessions, "state");
	cat.tools_pkey = relation_in(nsp, "undolog_tools_pkey");
	cat.t_tool_id = column_of(cat.tools, "tool_id");
	cat.t_owner_role = column_of(cat.tools, "owner_role");
	cat.t_tool_name = column_of(cat.tools, "tool_name");
	cat.t_tier = column_of(cat.tools, "tier");
	cat.t_compensation = column_of(cat.tools, "compensation");
	cat.t_retired_at = column_of(cat.tools, "retired_at");
	cat.heads_pkey = relation_in(nsp, "undolog_chain_heads_pkey");
	cat.h_session_id = column_of(cat.heads, "session_id");
	cat.h_seq = column_of(cat.heads, "seq");
	cat.h_prev = column_of(cat.heads, "prev");
	cat.h_head = column_of(cat.heads, "head");
	{
		Relation	sessions = table_open(cat.sessions, AccessShareLock);
		Relation	calls = table_open(cat.calls, AccessShareLock);

		cat.engine_owner = sessions->rd_rel->relowner;
		/* A row is read into and written from arrays of C_NCOLS columns. */
		if (RelationGetDescr(calls)->natts != C_NCOLS)
			elog(ERROR, "plain_live_calls has %d columns, not %d",
				 RelationGetDescr(calls)->natts, C_NCOLS);
		table_close(calls, NoLock);
		table_close(sessions, NoLock);
	}
	require_plain(cat.calls);
	require_plain(cat.heads);
	cat.payload_fits = function_oid("undolog.payload_fits", 1, fits_args);
	cat.check_payload = function_oid("undolog.check_payload", 2, check_args);
	if (cat.zero != (Datum) 0)
	{
		cat.ready = true;
		return;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	/* numbers_fit's bounds: the largest finite double and the smallest subnormal. */
	cat.max_double = DirectFunctionCall3(numeric_in, CStringGetDatum("1.7976931348623158e308"),
										 ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	cat.min_double = DirectFunctionCall3(numeric_in, CStringGetDatum("4.9406564584124654e-324"),
										 ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	cat.zero = DirectFunctionCall3(numeric_in, CStringGetDatum("0"),
								   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	MemoryContextSwitchTo(old);
	cat.ready = true;
}

/* session_user's name (the login), looked up again only when it changes. */
static const char *
login_name(void)
{
	Oid			user = GetSessionUserId();

	if (cat.user_name == NULL || cat.user_oid != user)
	{
		char	   *name = GetUserNameFromId(user, false);

		if (cat.user_name)
			pfree(cat.user_name);
		cat.user_name = MemoryContextStrdup(TopMemoryContext, name);
		cat.user_oid = user;
	}
	return cat.user_name;
}

/* --- small helpers --------------------------------------------------------------------- */

static bool
text_equals(Datum value, const char *s)
{
	text	   *t = DatumGetTextPP(value);
	size_t		len = VARSIZE_ANY_EXHDR(t);

	return len == strlen(s) && memcmp(VARDATA_ANY(t), s, len) == 0;
}

static void
append_uuid(StringInfo buf, const pg_uuid_t *id)
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < UUID_LEN; i++)
	{
		if (i == 4 || i == 6 || i == 8 || i == 10)
			appendStringInfoChar(buf, '-');
		appendStringInfoChar(buf, hex[id->data[i] >> 4]);
		appendStringInfoChar(buf, hex[id->data[i] & 0xF]);
	}
}

/* sha256 of prefix || data, into out (PG_SHA256_DIGEST_LENGTH bytes). */
static void
sha256_of(const void *prefix, size_t prefix_len, const void *data, size_t len, uint8 *out)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, prefix, prefix_len) < 0 ||
		pg_cryptohash_update(ctx, data, len) < 0 ||
		pg_cryptohash_final(ctx, out, PG_SHA256_DIGEST_LENGTH) < 0)
		elog(ERROR, "could not compute a SHA-256 hash: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
}

/*
 * One of the engine's advisory locks (undolog.advisory_key: the first 64 bits of
 * sha256(kind || ':' || value), big-endian), as pg_advisory_xact_lock_shared and
 * pg_try_advisory_xact_lock take a bigint key. Answers whether it was taken.
 */
static bool
advisory_xact_lock(const char *kind, const char *value, LOCKMODE mode, bool dont_wait)
{
	StringInfoData key_text;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	uint64		key = 0;
	LOCKTAG		tag;

	initStringInfo(&key_text);
	appendStringInfo(&key_text, "%s:%s", kind, value);
	sha256_of("", 0, key_text.data, key_text.len, digest);
	for (int i = 0; i < 8; i++)
		key = (key << 8) | digest[i];
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (key >> 32), (uint32) key, 1);
	return LockAcquire(&tag, mode, false, dont_wait) != LOCKACQUIRE_NOT_AVAIL;
}

/* A time as undolog.chain_time spells it: UTC, ISO 8601, microseconds and a Z. */
static void
append_chain_time(StringInfo buf, TimestampTz at)
{
	struct pg_tm tm;
	fsec_t		fsec;
	char		spelled[64];

	if (TIMESTAMP_NOT_FINITE(at) || timestamp2tm(at, NULL, &tm, &fsec, NULL, NULL) != 0
		|| tm.tm_year < 1)
		/* The engine never writes such a time into a live call; chain_time has a spelling. */
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("the C hot path spells only times of the Christian era"),
				 errhint("Use undolog.commit_effect for this call.")));
	snprintf(spelled, sizeof(spelled), "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
			 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int) fsec);
	escape_json(buf, spelled);
}

static void
append_text_json(StringInfo buf, Datum value)
{
	escape_json(buf, TextDatumGetCString(value));
}

static void
append_jsonb(StringInfo buf, Datum value)
{
	Jsonb	   *jb = DatumGetJsonbP(value);

	JsonbToCString(buf, &jb->root, VARSIZE(jb));
}

/*
 * The canonical record of a committed call, exactly as undolog.chain_record_effect's
 * json_build_object(...)::text writes it (" : " between a key and its value, ", "
 * between pairs; text and uuids as JSON strings, jsonb as its text, integers bare).
 */
static void
committed_record(StringInfo buf, Datum *call, Datum committed_at, const char *by,
				 Datum result)
{
	appendStringInfoString(buf, "{\"table\" : \"effect_log\", \"event\" : \"committed\", "
						   "\"session_id\" : \"");
	append_uuid(buf, DatumGetUUIDP(call[C_SESSION_ID]));
	appendStringInfoString(buf, "\", \"effect_id\" : \"");
	append_uuid(buf, DatumGetUUIDP(call[C_EFFECT_ID]));
	appendStringInfoString(buf, "\", \"executed_at\" : ");
	append_chain_time(buf, DatumGetTimestampTz(call[C_EXECUTED_AT]));
	appendStringInfoString(buf, ", \"call_signature\" : ");
	append_text_json(buf, call[C_CALL_SIGNATURE]);
	appendStringInfo(buf, ", \"step_index\" : %d, \"tool_name\" : ",
					 DatumGetInt32(call[C_STEP_INDEX]));
	append_text_json(buf, call[C_TOOL_NAME]);
	appendStringInfoString(buf, ", \"tier\" : ");
	append_text_json(buf, call[C_TIER]);
	appendStringInfoString(buf, ", \"args\" : ");
	append_jsonb(buf, call[C_ARGS]);
	appendStringInfoString(buf, ", \"intercepted_by\" : ");
	append_text_json(buf, call[C_INTERCEPTED_BY]);
	appendStringInfoString(buf, ", \"tool_id\" : \"");
	append_uuid(buf, DatumGetUUIDP(call[C_TOOL_ID]));
	appendStringInfoString(buf, "\", \"committed_at\" : ");
	append_chain_time(buf, DatumGetTimestampTz(committed_at));
	appendStringInfoString(buf, ", \"committed_by\" : ");
	escape_json(buf, by);
	appendStringInfoString(buf, ", \"result\" : ");
	append_jsonb(buf, result);
	appendStringInfoChar(buf, '}');
}

/* --- the checks ------------------------------------------------------------------------ */

/* undolog.signature_well_formed: 64 lowercase hex characters. */
static bool
signature_well_formed(text *sig)
{
	const char *s = VARDATA_ANY(sig);

	if (VARSIZE_ANY_EXHDR(sig) != 64)
		return false;
	for (int i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* undolog.numbers_fit: every number zero or a magnitude a finite double holds. */
static bool
numbers_fit(Jsonb *jb)
{
	JsonbIterator *it = JsonbIteratorInit(&jb->root);
	JsonbValue	v;
	JsonbIteratorToken token;

	while ((token = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		Datum		magnitude;

		if ((token != WJB_VALUE && token != WJB_ELEM) || v.type != jbvNumeric)
			continue;
		magnitude = DirectFunctionCall1(numeric_abs, NumericGetDatum(v.val.numeric));
		if (DatumGetInt32(DirectFunctionCall2(numeric_cmp, magnitude, cat.max_double)) > 0)
			return false;
		if (DatumGetInt32(DirectFunctionCall2(numeric_cmp, magnitude, cat.min_double)) < 0 &&
			DatumGetInt32(DirectFunctionCall2(numeric_cmp, magnitude, cat.zero)) != 0)
			return false;
	}
	return true;
}

/*
 * A payload (args or a result) within the engine's limits: undolog.payload_fits's fast
 * path in C (an uncompressed value of under 512 bytes whose numbers fit), anything
 * else by payload_fits itself; a refusal is check_payload's, with its SQLSTATE.
 */
static Jsonb *
checked_payload(const char *what, Datum value)
{
	struct varlena *raw = (struct varlena *) DatumGetPointer(value);
	bool		small = !VARATT_IS_EXTERNAL(raw) && !VARATT_IS_COMPRESSED(raw) &&
		VARSIZE_ANY(raw) < 512;
	Jsonb	   *jb = DatumGetJsonbP(value);
	Oid			caller;
	int			security;

	if (small && numbers_fit(jb))
		return jb;
	/*
	 * The engine's functions, with its owner's rights, as journal_call (SECURITY DEFINER)
	 * calls them: they are granted to nobody. An error resets the user with the
	 * transaction.
	 */
	GetUserIdAndSecContext(&caller, &security);
	SetUserIdAndSecContext(cat.engine_owner, security | SECURITY_LOCAL_USERID_CHANGE);
	if (small || !DatumGetBool(OidFunctionCall1(cat.payload_fits, JsonbPGetDatum(jb))))
	{
		OidFunctionCall2(cat.check_payload, CStringGetTextDatum(what), JsonbPGetDatum(jb));
		ereport(ERROR,
				(errcode(ERRCODE_UL008),
				 errmsg("%s is not within the payload limits", what),
				 errhint("Send numbers that a double holds, and at most "
						 "undolog.max_payload_bytes() of JSON text.")));
	}
	SetUserIdAndSecContext(caller, security);
	return jb;
}

/* --- rows, through the access methods --------------------------------------------------- */

/* The row of rel that index's entry for keys (heap column numbers) names, a copy, or NULL. */
static HeapTuple
fetch_one(Relation rel, Oid index, Snapshot snapshot, int nkeys, ScanKey keys)
{
	SysScanDesc scan = systable_beginscan(rel, index, true, snapshot, nkeys, keys);
	HeapTuple	tuple = systable_getnext(scan);

	if (tuple != NULL)
		tuple = heap_copytuple(tuple);
	systable_endscan(scan);
	return tuple;
}

static void
uuid_key(ScanKey key, AttrNumber att, pg_uuid_t *value)
{
	ScanKeyInit(key, att, BTEqualStrategyNumber, F_UUID_EQ, UUIDPGetDatum(value));
}

/*
 * A new tuple's index entries, as the executor makes them for an INSERT (a partial
 * index's predicate evaluated, unique indexes checked, 23505 on a duplicate key), with
 * the least of an executor: an EState, its ResultRelInfo and one slot. Also for an
 * UPDATE that could not be HOT (its page was full): the new version's entries.
 */
static void
insert_index_entries(Relation rel, HeapTuple tuple)
{
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *target = makeNode(ResultRelInfo);
	TupleTableSlot *slot;

	InitResultRelInfo(target, rel, 1, NULL, 0);
	ExecOpenIndices(target, false);
	slot = ExecInitExtraTupleSlot(estate, RelationGetDescr(rel), &TTSOpsHeapTuple);
	ExecStoreHeapTuple(tuple, slot, false);
	/* update = false: no "index unchanged" hint (it needs a range table), never wrong. */
	ExecInsertIndexTuples(target, slot, estate, false, false, NULL, NIL);
	ExecCloseIndices(target);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
}

/* A live call's columns, in call_columns's order. */
static void
deform_call(Relation calls, HeapTuple tuple, Datum *call, bool *isnull)
{
	Datum		values[C_NCOLS];
	bool		nulls[C_NCOLS];

	heap_deform_tuple(tuple, RelationGetDescr(calls), values, nulls);
	for (int i = 0; i < C_NCOLS; i++)
	{
		call[i] = values[cat.call_att[i] - 1];
		isnull[i] = nulls[cat.call_att[i] - 1];
	}
}

/*
 * The session's state, once its owner is known to be the caller: UL002 when there is
 * no such session (found false), 42501 when it is another login's (check_session_caller's
 * hint).
 */
static char *
checked_session_state(pg_uuid_t *session_id, bool found, Datum owner, bool owner_null,
					  Datum state, const char *me)
{
	StringInfoData id;

	initStringInfo(&id);
	append_uuid(&id, session_id);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UL002),
				 errmsg("unknown session %s", id.data),
				 errhint("Check the id: undolog sessions list shows the sessions; an agent "
						 "begins one with undolog.begin_session.")));
	if (owner_null || !text_equals(owner, me))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("session %s belongs to another role", id.data),
				 errhint("An agent acts only on the sessions its own login began.")));
	return TextDatumGetCString(state);
}

/* checked_session_state, of the session's row read in snapshot. */
static char *
own_session_state(pg_uuid_t *session_id, Snapshot snapshot, const char *me)
{
	Relation	sessions = table_open(cat.sessions, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(sessions);
	ScanKeyData key;
	HeapTuple	tuple;
	bool		owner_null = true;
	bool		state_null;
	Datum		owner = (Datum) 0;
	Datum		state = (Datum) 0;
	char	   *checked;

	uuid_key(&key, cat.s_session_id, session_id);
	tuple = fetch_one(sessions, cat.sessions_pkey, snapshot, 1, &key);
	if (tuple != NULL)
	{
		owner = heap_getattr(tuple, cat.s_owner_role, desc, &owner_null);
		state = heap_getattr(tuple, cat.s_state, desc, &state_null);
	}
	checked = checked_session_state(session_id, tuple != NULL, owner, owner_null, state, me);
	table_close(sessions, NoLock);
	return checked;
}

/* A new call's session must be active (UL010). */
static void
check_active_for_new_call(pg_uuid_t *session_id, const char *session_state)
{
	StringInfoData id;

	if (strcmp(session_state, "active") == 0)
		return;
	initStringInfo(&id);
	append_uuid(&id, session_id);
	ereport(ERROR,
			(errcode(ERRCODE_UL010),
			 errmsg("session %s is %s: new calls are refused", id.data, session_state),
			 errhint("Begin a new session for new calls (undolog.begin_session); this one "
					 "answers only calls made again, from its journal.")));
}

/* The commit's call: the caller's (42501), executing (UL001), of an active session (UL010). */
static void
check_committable(Datum intercepted_by, Datum state, const char *session_state,
				  const char *me)
{
	if (!text_equals(intercepted_by, me))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("the effect was journaled by another role"),
				 errhint("An agent commits only the calls its own login made.")));
	if (!text_equals(state, "executing"))
		ereport(ERROR,
				(errcode(ERRCODE_UL001),
				 errmsg("the effect is %s, not executing", TextDatumGetCString(state)),
				 errhint("Only an executing call commits, once; a call made again answers "
						 "its result from the journal.")));
	if (strcmp(session_state, "active") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_UL010),
				 errmsg("the session is %s: its calls no longer commit", session_state),
				 errhint("Begin a new session for new calls (undolog.begin_session).")));
}

/*
 * The registration: a live one of this login's (UL017). Its tier is the call's (the
 * agent never names one): only COMPENSABLE is this prototype's.
 */
static void
check_registration(bool found, Datum owner, bool retired_null, Datum tier, const char *me)
{
	if (!found || !text_equals(owner, me) || !retired_null)
		ereport(ERROR,
				(errcode(ERRCODE_UL017),
				 errmsg("tool is not registered for %s", me),
				 errdetail("No live registration of this login has that tool_id: it was "
						   "retired, or it is another login's, or there is none."),
				 errhint("Register the tool again with undolog.register_tool (the binding "
						 "does so once, then retries), and call with the tool_id it answers.")));
	if (!text_equals(tier, "compensable"))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the C hot path journals COMPENSABLE calls only"),
				 errhint("Call an IRREVERSIBLE tool through undolog.intercept_tool, which "
						 "asks for its approval.")));
}

/* A call made again must be the one its signature was first sent for (UL005). */
static void
check_same_call(Datum step, Datum tool, Datum args, int32 new_step, pg_uuid_t *new_tool,
				Jsonb *new_args)
{
	if (DatumGetInt32(step) != new_step ||
		memcmp(DatumGetUUIDP(tool), new_tool, UUID_LEN) != 0 ||
		!DatumGetBool(DirectFunctionCall2(jsonb_eq, args, JsonbPGetDatum(new_args))))
		ereport(ERROR,
				(errcode(ERRCODE_UL005),
				 errmsg("the signature is known in this session for another call"),
				 errhint("A signature names one call (its session, step, tool and args): "
						 "compute it over the call you make.")));
}

/*
 * The call's own part, in check_call_args's order, before any table is read
 * (arguments: session_id, tool_id, step_index, args, call_signature).
 */
static void
check_call_args(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(4) || !signature_well_formed(PG_GETARG_TEXT_PP(4)))
		ereport(ERROR,
				(errcode(ERRCODE_UL004),
				 errmsg("call_signature must be 64 lowercase hex characters (BLAKE3-256)"),
				 errhint("Compute the signature with undolog.signature.call_signature (Python) "
						 "over the call's session, step, tool and args: "
						 "docs/reference/signature.md.")));
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_UL008), errmsg("session_id is required"),
				 errhint("Pass the session_id that undolog.begin_session answered.")));
	if (PG_ARGISNULL(2) || PG_GETARG_INT32(2) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UL008), errmsg("step_index must be an integer >= 0"),
				 errhint("Number a session's calls from 0, one step per call, as the "
						 "binding does.")));
	if (PG_ARGISNULL(3) || !JB_ROOT_IS_OBJECT(PG_GETARG_JSONB_P(3)))
		ereport(ERROR,
				(errcode(ERRCODE_UL008), errmsg("args must be a JSON object"),
				 errhint("Pass the tool's arguments as a JSON object of named arguments, "
						 "e.g. '{\"amount\": 5}'.")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_UL008), errmsg("tool_id is required"),
				 errhint("Pass the tool_id that undolog.register_tool answered (the binding "
						 "does so for you).")));
}

/* The commit's arguments (session_id, effect_id): both required. */
static void
check_commit_args(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_UL008), errmsg("session_id is required"),
				 errhint("Pass the session_id that undolog.begin_session answered.")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_UL008), errmsg("effect_id is required"),
				 errhint("Pass the effect_id that undolog.c_intercept answered.")));
}

/* commit_effect's p_async (argument 3): asynchronous only as the transaction's first write. */
static void
commit_asynchronously_if(FunctionCallInfo fcinfo)
{
	if (!PG_ARGISNULL(3) && PG_GETARG_BOOL(3) &&
		!TransactionIdIsValid(GetTopTransactionIdIfAny()))
		(void) set_config_option("synchronous_commit", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
}

/* What the session's advisory lock keys (its id and the login), or the call's (and its signature). */
static char *
lock_value(pg_uuid_t *session_id, const char *rest, size_t rest_len)
{
	StringInfoData value;

	initStringInfo(&value);
	append_uuid(&value, session_id);
	appendStringInfoChar(&value, ':');
	appendBinaryStringInfo(&value, rest, rest_len);
	return value.data;
}

static void
require_read_committed_writable(void)
{
	if (XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot journal a call in a read-only transaction"),
				 errhint("Call it in a read-write transaction.")));
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the C hot path runs only under READ COMMITTED"),
				 errhint("Use undolog.intercept_tool and undolog.commit_effect under "
						 "REPEATABLE READ or SERIALIZABLE.")));
}

/* undolog.effect_id_at(now()): a version 7 id carrying the time to the microsecond. */
static pg_uuid_t *
effect_id_at(TimestampTz at)
{
	pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));
	int64		unix_us = at + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
	int64		ms = unix_us / 1000;
	uint16		rand_a = 0x7000 + (uint16) (unix_us % 1000);

	if (!pg_strong_random(id->data + 8, 8))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values"),
				 errhint("Check the server's source of randomness.")));
	for (int i = 0; i < 6; i++)
		id->data[i] = (uint8) (ms >> (8 * (5 - i)));
	id->data[6] = (uint8) (rand_a >> 8);
	id->data[7] = (uint8) rand_a;
	id->data[8] = (id->data[8] & 0x3F) | 0x80;	/* the RFC 9562 variant */
	return id;
}

/* An intercept's arguments, checked, and its caller (both builds read them alike). */
typedef struct InterceptArgs
{
	pg_uuid_t  *session_id;
	pg_uuid_t  *tool_id;
	int32		step;
	Jsonb	   *args;			/* within the payload limits */
	text	   *signature;
	const char *me;				/* session_user's name */
} InterceptArgs;

/* A commit's arguments, checked, and its caller. */
typedef struct CommitArgs
{
	pg_uuid_t  *session_id;
	pg_uuid_t  *effect_id;
	Jsonb	   *result;			/* within the payload limits; JSON null for SQL NULL */
	const char *me;
} CommitArgs;

/*
 * What both intercepts do first: the call's own part checked before any table is read,
 * the tables' layout, READ COMMITTED and writable, the payload limits.
 */
static void
intercept_args(FunctionCallInfo fcinfo, InterceptArgs *in)
{
	check_call_args(fcinfo);
	ensure_catalog();
	require_read_committed_writable();
	in->session_id = PG_GETARG_UUID_P(0);
	in->tool_id = PG_GETARG_UUID_P(1);
	in->step = PG_GETARG_INT32(2);
	in->args = checked_payload("args", PG_GETARG_DATUM(3));
	in->signature = PG_GETARG_TEXT_PP(4);
	in->me = login_name();
}

/* What both commits do first, as intercept_args; asynchronous as commit_effect's p_async. */
static void
commit_args(FunctionCallInfo fcinfo, CommitArgs *in)
{
	check_commit_args(fcinfo);
	ensure_catalog();
	require_read_committed_writable();
	commit_asynchronously_if(fcinfo);
	in->session_id = PG_GETARG_UUID_P(0);
	in->effect_id = PG_GETARG_UUID_P(1);
	in->result = checked_payload("result", PG_ARGISNULL(2)
								 ? DirectFunctionCall1(jsonb_in, CStringGetDatum("null"))
								 : PG_GETARG_DATUM(2));
	in->me = login_name();
}

/* --- intercept ------------------------------------------------------------------------- */

/*
 * undolog.c_intercept(session_id, tool_id, step_index, args, call_signature):
 * intercept_tool's COMPENSABLE path. Answers (effect_id, action, result_snapshot):
 * 'execute' for a new call; 'replay' and the cached result for a committed call made
 * again; the state of a call made again before its commit; 'in_progress' (no effect)
 * while another transaction journals this very call.
 */
Datum
undolog_c_intercept(PG_FUNCTION_ARGS)
{
	TupleDesc	answer_desc;
	Datum		answer[3];
	bool		answer_null[3] = {false, false, true};
	pg_uuid_t  *session_id;
	pg_uuid_t  *tool_id;
	int32		step;
	Jsonb	   *args;
	text	   *signature;
	const char *me;
	Relation	tools;
	Relation	calls;
	ScanKeyData keys[2];
	HeapTuple	tool;
	Datum		tool_values[32];
	bool		tool_nulls[32];
	char	   *session_state;
	Snapshot	snapshot;
	HeapTuple	found;
	InterceptArgs in;

	if (get_call_result_type(fcinfo, NULL, &answer_desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "undolog.c_intercept must answer a row");
	intercept_args(fcinfo, &in);
	session_id = in.session_id;
	tool_id = in.tool_id;
	step = in.step;
	args = in.args;
	signature = in.signature;
	me = in.me;

	/* The registration, by its primary key. */
	tools = table_open(cat.tools, AccessShareLock);
	uuid_key(&keys[0], cat.t_tool_id, tool_id);
	tool = fetch_one(tools, cat.tools_pkey, GetActiveSnapshot(), 1, keys);
	if (RelationGetDescr(tools)->natts > 32)
		elog(ERROR, "undolog_tools has more columns than expected");
	if (tool != NULL)
		heap_deform_tuple(tool, RelationGetDescr(tools), tool_values, tool_nulls);
	check_registration(tool != NULL, tool_values[cat.t_owner_role - 1],
					   tool_nulls[cat.t_retired_at - 1], tool_values[cat.t_tier - 1], me);
	table_close(tools, NoLock);

	/*
	 * The session's advisory lock, shared (session_lock_key: keyed by the caller's login),
	 * then the session read in a snapshot taken after it: whatever moved the session
	 * while the lock was waited for is seen. The wait is not bounded here (the engine's
	 * is: 5 s, then UL030).
	 */
	advisory_xact_lock("session", lock_value(session_id, me, strlen(me)), ShareLock, false);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	session_state = own_session_state(session_id, snapshot, me);
	UnregisterSnapshot(snapshot);

	/* Another transaction journaling this very call holds its key: don't queue. */
	if (!advisory_xact_lock("signature", lock_value(session_id, VARDATA_ANY(signature),
													 VARSIZE_ANY_EXHDR(signature)),
							ExclusiveLock, true))
	{
		answer_null[0] = true;
		answer[1] = CStringGetTextDatum("in_progress");
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(answer_desc, answer, answer_null)));
	}

	/*
	 * The exactly-once key, probed in a snapshot taken once the call's key is held: a
	 * transaction that journaled it and ended before is seen, one still journaling it
	 * holds the key (above).
	 */
	calls = table_open(cat.calls, RowExclusiveLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	uuid_key(&keys[0], cat.call_att[C_SESSION_ID], session_id);
	ScanKeyInit(&keys[1], cat.call_att[C_CALL_SIGNATURE], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(signature));
	keys[1].sk_collation = TupleDescAttr(RelationGetDescr(calls),
										 cat.call_att[C_CALL_SIGNATURE] - 1)->attcollation;
	found = fetch_one(calls, cat.calls_key, snapshot, 2, keys);
	UnregisterSnapshot(snapshot);
	if (found != NULL)
	{
		Datum		call[C_NCOLS];
		bool		isnull[C_NCOLS];

		deform_call(calls, found, call, isnull);
		check_same_call(call[C_STEP_INDEX], call[C_TOOL_ID], call[C_ARGS], step, tool_id, args);
		answer[0] = call[C_EFFECT_ID];
		if (text_equals(call[C_STATE], "committed"))
		{
			answer[1] = CStringGetTextDatum("replay");
			answer[2] = call[C_RESULT_SNAPSHOT];
			answer_null[2] = isnull[C_RESULT_SNAPSHOT];
		}
		else
			answer[1] = call[C_STATE];
	}
	else
	{
		Datum		values[C_NCOLS];
		bool		nulls[C_NCOLS];
		Datum		row[C_NCOLS];
		bool		row_nulls[C_NCOLS];
		TimestampTz now = GetCurrentTransactionStartTimestamp();
		HeapTuple	tuple;

		check_active_for_new_call(session_id, session_state);
		memset(nulls, true, sizeof(nulls));
		values[C_SESSION_ID] = UUIDPGetDatum(session_id);
		values[C_CALL_SIGNATURE] = PointerGetDatum(signature);
		values[C_EFFECT_ID] = UUIDPGetDatum(effect_id_at(now));
		values[C_EXECUTED_AT] = TimestampTzGetDatum(now);
		values[C_STACK_POSITION] = Int64GetDatum(nextval_internal(cat.stack_seq, false));
		values[C_STEP_INDEX] = Int32GetDatum(step);
		values[C_TOOL_ID] = UUIDPGetDatum(tool_id);
		values[C_TOOL_NAME] = tool_values[cat.t_tool_name - 1];
		values[C_TIER] = tool_values[cat.t_tier - 1];
		values[C_ARGS] = JsonbPGetDatum(args);
		values[C_COMPENSATION] = tool_values[cat.t_compensation - 1];
		values[C_INTERCEPTED_BY] = CStringGetTextDatum(me);
		values[C_STATE] = CStringGetTextDatum("executing");
		values[C_UNDO_STATE] = CStringGetTextDatum("pending");
		for (int i = C_SESSION_ID; i <= C_UNDO_STATE; i++)
			nulls[i] = (i == C_COMPENSATION) ? tool_nulls[cat.t_compensation - 1] : false;
		for (int i = 0; i < C_NCOLS; i++)
		{
			row[cat.call_att[i] - 1] = values[i];
			row_nulls[cat.call_att[i] - 1] = nulls[i];
		}
		tuple = heap_form_tuple(RelationGetDescr(calls), row, row_nulls);
		simple_heap_insert(calls, tuple);
		insert_index_entries(calls, tuple);
		answer[0] = values[C_EFFECT_ID];
		answer[1] = CStringGetTextDatum("execute");
	}
	table_close(calls, NoLock);
	/* What this call wrote is seen by the next statement of the caller's transaction. */
	CommandCounterIncrement();
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(answer_desc, answer, answer_null)));
}

/* --- commit ---------------------------------------------------------------------------- */

/*
 * undolog.c_commit(session_id, effect_id, result, async): commit_effect for a call
 * c_intercept journaled. The caller's executing call of its own active session becomes
 * committed with its result, its login and the transaction's time, linked into the
 * session's hash chain: the head moves over the canonical record of the committed call
 * (chain_record_effect, chain_hash), and the row stores its link (commit_seq,
 * commit_prev, commit_hash). Both rows are updated in place (HOT when their page has
 * room: no indexed column changes). Asynchronously committed (async) when this is the
 * transaction's first write, as commit_effect's p_async.
 */
Datum
undolog_c_commit(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *session_id;
	pg_uuid_t  *effect_id;
	Jsonb	   *result;
	const char *me;
	Relation	calls;
	Relation	heads;
	ScanKeyData keys[2];
	HeapTuple	call_tuple;
	HeapTuple	head_tuple;
	HeapTuple	new_call;
	HeapTuple	new_head;
	Datum		call[C_NCOLS];
	bool		call_nulls[C_NCOLS];
	char	   *session_state;
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	StringInfoData record;
	uint8		hash[PG_SHA256_DIGEST_LENGTH];
	bytea	   *hash_value;
	int64		seq;
	bytea	   *prev;
	TM_FailureData failure;
	LockTupleMode lock_mode;
	TM_Result	outcome;
	CommitArgs	in;

	commit_args(fcinfo, &in);
	session_id = in.session_id;
	effect_id = in.effect_id;
	result = in.result;
	me = in.me;

	calls = table_open(cat.calls, RowExclusiveLock);
	uuid_key(&keys[0], cat.call_att[C_EFFECT_ID], effect_id);
	uuid_key(&keys[1], cat.call_att[C_SESSION_ID], session_id);
	call_tuple = fetch_one(calls, cat.calls_effect, GetActiveSnapshot(), 2, keys);
	if (call_tuple == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UL003),
				 errmsg("unknown effect in this session"),
				 errhint("Commit the effect_id that undolog.c_intercept answered, with its "
						 "session's id.")));
	session_state = own_session_state(session_id, GetActiveSnapshot(), me);
	deform_call(calls, call_tuple, call, call_nulls);
	check_committable(call[C_INTERCEPTED_BY], call[C_STATE], session_state, me);

	/*
	 * The session's head, moved over the committed call's record. A concurrent commit
	 * in the same session that moved it first (heap_update waited for it, then answered
	 * TM_Updated) is read again in a new snapshot and linked after, as READ COMMITTED's
	 * UPDATE would re-check its row.
	 */
	initStringInfo(&record);
	committed_record(&record, call, TimestampTzGetDatum(now), me, JsonbPGetDatum(result));
	heads = table_open(cat.heads, RowExclusiveLock);
	uuid_key(&keys[0], cat.h_session_id, session_id);
	head_tuple = fetch_one(heads, cat.heads_pkey, GetActiveSnapshot(), 1, keys);
	for (;;)
	{
		Datum		values[8];
		bool		nulls[8] = {false};
		bool		replaces[8] = {false};
		bool		isnull;
		Snapshot	latest;

		if (head_tuple == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("the session has no chain head"),
					 errhint("Run undolog verify: a session's head is made when it begins.")));
		if (RelationGetDescr(heads)->natts > 8)
			elog(ERROR, "undolog_chain_heads has more columns than expected");
		seq = DatumGetInt64(heap_getattr(head_tuple, cat.h_seq, RelationGetDescr(heads),
										 &isnull));
		prev = DatumGetByteaPP(heap_getattr(head_tuple, cat.h_head, RelationGetDescr(heads),
											&isnull));
		sha256_of(VARDATA_ANY(prev), VARSIZE_ANY_EXHDR(prev), record.data, record.len, hash);
		hash_value = palloc(VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
		SET_VARSIZE(hash_value, VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
		memcpy(VARDATA(hash_value), hash, PG_SHA256_DIGEST_LENGTH);
		values[cat.h_seq - 1] = Int64GetDatum(seq + 1);
		values[cat.h_prev - 1] = PointerGetDatum(prev);
		values[cat.h_head - 1] = PointerGetDatum(hash_value);
		replaces[cat.h_seq - 1] = replaces[cat.h_prev - 1] = replaces[cat.h_head - 1] = true;
		new_head = heap_modify_tuple(head_tuple, RelationGetDescr(heads), values, nulls,
									 replaces);
		outcome = heap_update(heads, &head_tuple->t_self, new_head, GetCurrentCommandId(true),
							  InvalidSnapshot, true, &failure, &lock_mode);
		if (outcome == TM_Ok)
			break;
		if (outcome != TM_Updated)
			ereport(ERROR,
					(errcode(ERRCODE_UL001),
					 errmsg("the session's chain head changed in this statement"),
					 errhint("Commit one call per statement.")));
		latest = RegisterSnapshot(GetLatestSnapshot());
		head_tuple = fetch_one(heads, cat.heads_pkey, latest, 1, keys);
		UnregisterSnapshot(latest);
	}
	if (!HeapTupleIsHeapOnly(new_head))
		insert_index_entries(heads, new_head);

	/* The call's row: committed, with its link. */
	{
		Datum		values[C_NCOLS];
		bool		nulls[C_NCOLS];
		bool		replaces[C_NCOLS];
		Datum		row[C_NCOLS];
		bool		row_nulls[C_NCOLS];
		bool		row_replaces[C_NCOLS];

		memset(nulls, false, sizeof(nulls));
		memset(replaces, false, sizeof(replaces));
		values[C_STATE] = CStringGetTextDatum("committed");
		values[C_RESULT_SNAPSHOT] = JsonbPGetDatum(result);
		values[C_COMMITTED_AT] = TimestampTzGetDatum(now);
		values[C_COMMITTED_BY] = CStringGetTextDatum(me);
		values[C_COMMIT_SEQ] = Int64GetDatum(seq + 1);
		values[C_COMMIT_PREV] = PointerGetDatum(prev);
		values[C_COMMIT_HASH] = PointerGetDatum(hash_value);
		replaces[C_STATE] = replaces[C_RESULT_SNAPSHOT] = replaces[C_COMMITTED_AT] = true;
		replaces[C_COMMITTED_BY] = replaces[C_COMMIT_SEQ] = true;
		replaces[C_COMMIT_PREV] = replaces[C_COMMIT_HASH] = true;
		for (int i = 0; i < C_NCOLS; i++)
		{
			row[cat.call_att[i] - 1] = replaces[i] ? values[i] : (Datum) 0;
			row_nulls[cat.call_att[i] - 1] = nulls[i];
			row_replaces[cat.call_att[i] - 1] = replaces[i];
		}
		new_call = heap_modify_tuple(call_tuple, RelationGetDescr(calls), row, row_nulls,
									 row_replaces);
	}
	outcome = heap_update(calls, &call_tuple->t_self, new_call, GetCurrentCommandId(true),
						  InvalidSnapshot, true, &failure, &lock_mode);
	if (outcome != TM_Ok)
		ereport(ERROR,
				(errcode(ERRCODE_UL001),
				 errmsg("the effect was committed by another transaction"),
				 errhint("Only an executing call commits, once; a call made again answers "
						 "its result from the journal.")));
	if (!HeapTupleIsHeapOnly(new_call))
		insert_index_entries(calls, new_call);
	table_close(heads, NoLock);
	table_close(calls, NoLock);
	CommandCounterIncrement();
	PG_RETURN_TEXT_P(cstring_to_text("committed"));
}

/* --- the same, through SPI: a second data point ---------------------------------------- */

/*
 * undolog.c_intercept_spi and undolog.c_commit_spi: the same checks in C, the same
 * locks, the same record and hash, but each read and write of a table a prepared
 * statement run through SPI (plans kept for the backend's life), with the engine
 * owner's rights (as a SECURITY DEFINER function's; the table's policies do not bind
 * its owner): what the executor's set-up costs per statement, beside the access
 * methods above.
 */
PG_FUNCTION_INFO_V1(undolog_c_intercept_spi);
PG_FUNCTION_INFO_V1(undolog_c_commit_spi);

typedef struct SpiStatement
{
	const char *sql;
	int			nargs;
	Oid			types[9];
	SPIPlanPtr	plan;
} SpiStatement;

static SpiStatement spi_tool = {
	"SELECT t.owner_role, t.retired_at IS NULL, t.tier, t.tool_name, t.compensation"
	" FROM undolog.undolog_tools AS t WHERE t.tool_id = $1",
	1, {UUIDOID}
};
static SpiStatement spi_session = {
	"SELECT s.owner_role, s.state FROM undolog.undolog_sessions AS s WHERE s.session_id = $1",
	1, {UUIDOID}
};
static SpiStatement spi_probe = {
	"SELECT c.effect_id, c.state, c.result_snapshot, c.step_index, c.tool_id, c.args"
	" FROM undolog.plain_live_calls AS c WHERE c.session_id = $1 AND c.call_signature = $2",
	2, {UUIDOID, TEXTOID}
};
static SpiStatement spi_insert = {
	"INSERT INTO undolog.plain_live_calls (session_id, call_signature, effect_id,"
	" executed_at, step_index, tool_id, tool_name, tier, args, compensation, intercepted_by)"
	" VALUES ($1, $2, $3, now(), $4, $5, $6, $7, $8, $9, session_user)",
	9, {UUIDOID, TEXTOID, UUIDOID, INT4OID, UUIDOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID}
};
static SpiStatement spi_call = {
	"SELECT c.session_id, c.call_signature, c.effect_id, c.executed_at, c.stack_position,"
	" c.step_index, c.tool_id, c.tool_name, c.tier, c.args, c.compensation,"
	" c.intercepted_by, c.state"
	" FROM undolog.plain_live_calls AS c WHERE c.effect_id = $1 AND c.session_id = $2",
	2, {UUIDOID, UUIDOID}
};
/* The head moves over the record in one statement: a concurrent commit is re-read. */
static SpiStatement spi_head = {
	"UPDATE undolog.undolog_chain_heads AS h"
	" SET seq = h.seq + 1, prev = h.head, head = pg_catalog.sha256(h.head || $2)"
	" WHERE h.session_id = $1 RETURNING h.seq, h.prev, h.head",
	2, {UUIDOID, BYTEAOID}
};
static SpiStatement spi_commit = {
	"UPDATE undolog.plain_live_calls AS c SET state = 'committed', result_snapshot = $3,"
	" committed_at = now(), committed_by = session_user, commit_seq = $4, commit_prev = $5,"
	" commit_hash = $6"
	" WHERE c.effect_id = $1 AND c.session_id = $2 AND c.state = 'executing'",
	6, {UUIDOID, UUIDOID, JSONBOID, INT8OID, BYTEAOID, BYTEAOID}
};

/* Runs st (prepared once) with values; answers the rows it processed. */
static uint64
spi_run(SpiStatement *st, Datum *values, bool read_only)
{
	int			rc;

	if (st->plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(st->sql, st->nargs, st->types);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for %s: %s", st->sql,
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		st->plan = plan;
	}
	rc = SPI_execute_plan(st->plan, values, NULL, read_only, 0);
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
}

static Datum
spi_value(int column, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, column, isnull);
}

/*
 * checked_session_state, of the session's row read through SPI (read_only false: in a
 * new snapshot, as after the session's lock).
 */
static char *
spi_own_session_state(pg_uuid_t *session_id, bool read_only, const char *me)
{
	Datum		params[1] = {UUIDPGetDatum(session_id)};
	bool		found = spi_run(&spi_session, params, read_only) == 1;
	bool		owner_null = true;
	bool		state_null;
	Datum		owner = (Datum) 0;
	Datum		state = (Datum) 0;

	if (found)
	{
		owner = spi_value(1, &owner_null);
		state = spi_value(2, &state_null);
	}
	return checked_session_state(session_id, found, owner, owner_null, state, me);
}

Datum
undolog_c_intercept_spi(PG_FUNCTION_ARGS)
{
	TupleDesc	answer_desc;
	Datum		answer[3];
	bool		answer_null[3] = {false, false, true};
	pg_uuid_t  *session_id;
	pg_uuid_t  *tool_id;
	int32		step;
	Jsonb	   *args;
	text	   *signature;
	const char *me;
	Oid			caller;
	int			security;
	Datum		params[9];
	bool		isnull;
	bool		retired_null = false;
	bool		found;
	Datum		owner = (Datum) 0;
	Datum		tier = (Datum) 0;
	Datum		tool_name = (Datum) 0;
	Datum		compensation = (Datum) 0;
	char	   *session_state;
	HeapTupleHeader answered;
	InterceptArgs in;

	if (get_call_result_type(fcinfo, NULL, &answer_desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "undolog.c_intercept_spi must answer a row");
	intercept_args(fcinfo, &in);
	session_id = in.session_id;
	tool_id = in.tool_id;
	step = in.step;
	args = in.args;
	signature = in.signature;
	me = in.me;

	GetUserIdAndSecContext(&caller, &security);
	SetUserIdAndSecContext(cat.engine_owner, security | SECURITY_LOCAL_USERID_CHANGE);
	SPI_connect();
	params[0] = UUIDPGetDatum(tool_id);
	found = spi_run(&spi_tool, params, true) == 1;
	if (found)
	{
		owner = spi_value(1, &isnull);
		retired_null = DatumGetBool(spi_value(2, &isnull));
		tier = spi_value(3, &isnull);
		tool_name = spi_value(4, &isnull);
		compensation = spi_value(5, &isnull);
	}
	check_registration(found, owner, retired_null, tier, me);

	advisory_xact_lock("session", lock_value(session_id, me, strlen(me)), ShareLock, false);
	/* A statement that is not read-only takes a new snapshot: after the lock. */
	session_state = spi_own_session_state(session_id, false, me);
	if (!advisory_xact_lock("signature", lock_value(session_id, VARDATA_ANY(signature),
													 VARSIZE_ANY_EXHDR(signature)),
							ExclusiveLock, true))
	{
		answer_null[0] = true;
		answer[1] = CStringGetTextDatum("in_progress");
	}
	else
	{
		params[0] = UUIDPGetDatum(session_id);
		params[1] = PointerGetDatum(signature);
		if (spi_run(&spi_probe, params, false) == 1)
		{
			bool		result_null;

			check_same_call(spi_value(4, &isnull), spi_value(5, &isnull),
							spi_value(6, &isnull), step, tool_id, args);
			answer[0] = spi_value(1, &isnull);
			if (text_equals(spi_value(2, &isnull), "committed"))
			{
				answer[1] = CStringGetTextDatum("replay");
				answer[2] = spi_value(3, &result_null);
				answer_null[2] = result_null;
			}
			else
				answer[1] = spi_value(2, &isnull);
		}
		else
		{
			check_active_for_new_call(session_id, session_state);
			params[0] = UUIDPGetDatum(session_id);
			params[1] = PointerGetDatum(signature);
			params[2] = UUIDPGetDatum(effect_id_at(GetCurrentTransactionStartTimestamp()));
			params[3] = Int32GetDatum(step);
			params[4] = UUIDPGetDatum(tool_id);
			params[5] = tool_name;
			params[6] = tier;
			params[7] = JsonbPGetDatum(args);
			params[8] = compensation;
			spi_run(&spi_insert, params, false);
			answer[0] = params[2];
			answer[1] = CStringGetTextDatum("execute");
		}
	}
	answered = SPI_returntuple(heap_form_tuple(answer_desc, answer, answer_null), answer_desc);
	SPI_finish();
	SetUserIdAndSecContext(caller, security);
	PG_RETURN_DATUM(PointerGetDatum(answered));
}

Datum
undolog_c_commit_spi(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *session_id;
	pg_uuid_t  *effect_id;
	Jsonb	   *result;
	const char *me;
	Oid			caller;
	int			security;
	Datum		params[6];
	Datum		call[C_NCOLS];
	bool		isnull;
	char	   *session_state;
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	StringInfoData record;
	bytea	   *record_bytes;
	CommitArgs	in;

	commit_args(fcinfo, &in);
	session_id = in.session_id;
	effect_id = in.effect_id;
	result = in.result;
	me = in.me;

	GetUserIdAndSecContext(&caller, &security);
	SetUserIdAndSecContext(cat.engine_owner, security | SECURITY_LOCAL_USERID_CHANGE);
	SPI_connect();
	params[0] = UUIDPGetDatum(effect_id);
	params[1] = UUIDPGetDatum(session_id);
	if (spi_run(&spi_call, params, true) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UL003),
				 errmsg("unknown effect in this session"),
				 errhint("Commit the effect_id that undolog.c_intercept answered, with its "
						 "session's id.")));
	for (int i = 0; i <= C_STATE; i++)
		call[i] = spi_value(i + 1, &isnull);
	session_state = spi_own_session_state(session_id, true, me);
	check_committable(call[C_INTERCEPTED_BY], call[C_STATE], session_state, me);

	initStringInfo(&record);
	committed_record(&record, call, TimestampTzGetDatum(now), me, JsonbPGetDatum(result));
	record_bytes = palloc(VARHDRSZ + record.len);
	SET_VARSIZE(record_bytes, VARHDRSZ + record.len);
	memcpy(VARDATA(record_bytes), record.data, record.len);
	params[0] = UUIDPGetDatum(session_id);
	params[1] = PointerGetDatum(record_bytes);
	if (spi_run(&spi_head, params, false) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the session has no chain head"),
				 errhint("Run undolog verify: a session's head is made when it begins.")));
	params[3] = spi_value(1, &isnull);
	params[4] = spi_value(2, &isnull);
	params[5] = spi_value(3, &isnull);
	params[0] = UUIDPGetDatum(effect_id);
	params[1] = UUIDPGetDatum(session_id);
	params[2] = JsonbPGetDatum(result);
	if (spi_run(&spi_commit, params, false) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UL001),
				 errmsg("the effect was committed by another transaction"),
				 errhint("Only an executing call commits, once; a call made again answers "
						 "its result from the journal.")));
	SPI_finish();
	SetUserIdAndSecContext(caller, security);
	PG_RETURN_TEXT_P(cstring_to_text("committed"));
}
