package chhttp

import "strings"

// The store's allowlist: what each role may name, checked against the
// engine's own parse of a statement (gate.go). Anything not listed here is
// refused, so an engine upgrade that adds a table function, a table engine,
// a format or a setting adds nothing a client can reach until it is
// classified here; conformance_test.go walks the engine's catalogue
// (system.table_functions, system.table_engines, system.formats,
// system.settings) and fails on a row this file does not classify.

// Role is what a request's user may do. Roles are ordered: each may do what
// the one before it may.
type Role int

const (
	// RoleReadOnly reads the store's database and a few system tables:
	// SELECT, SHOW, DESCRIBE, EXISTS, EXPLAIN (Grafana's user).
	RoleReadOnly Role = iota + 1
	// RoleIngest also INSERTs into the store's tables and deletes rows
	// (DELETE FROM): the ingest, the detectors, the operator.
	RoleIngest
	// RoleMigrate also changes the schema: CREATE, ALTER, DROP, RENAME,
	// OPTIMIZE, TRUNCATE, with MergeTree-family engines only.
	RoleMigrate
)

func (r Role) String() string {
	switch r {
	case RoleReadOnly:
		return "read-only"
	case RoleIngest:
		return "ingest"
	case RoleMigrate:
		return "migrate"
	}
	return "none"
}

// statementKinds maps the root of the engine's EXPLAIN AST to the least
// role that may run it. ATTACH, DETACH, SYSTEM, KILL, BACKUP, GRANT, SET,
// USE, transactions, SHOW PROCESSLIST, dictionaries, functions and every
// other kind are absent: refused for every role.
var statementKinds = map[string]Role{
	"SelectWithUnionQuery":       RoleReadOnly,
	"SelectIntersectExceptQuery": RoleReadOnly,
	"ShowTables":                 RoleReadOnly, // SHOW TABLES, SHOW DATABASES
	"ShowColumns":                RoleReadOnly,
	"ShowCreateTableQuery":       RoleReadOnly,
	"DescribeQuery":              RoleReadOnly,
	"ExistsTableQuery":           RoleReadOnly,
	"Explain":                    RoleReadOnly, // its statement is checked as well
	"InsertQuery":                RoleIngest,
	"DeleteQuery":                RoleIngest, // lightweight DELETE (the captures index)
	"CreateQuery":                RoleMigrate,
	"AlterQuery":                 RoleMigrate,
	"DropQuery":                  RoleMigrate,
	"TruncateQuery":              RoleMigrate,
	"Rename":                     RoleMigrate,
	"OptimizeQuery":              RoleMigrate,
}

// tableFunctions are the table functions a statement may name (after FROM,
// in INSERT INTO FUNCTION, in CREATE … AS): generators of rows from
// nothing, and input() for INSERT … SELECT … FROM input(). Every other row
// of system.table_functions (file, url, s3, remote, format, merge,
// executable, mergeTreeIndex, view, …) reaches a file, a host, another
// database, or parses bytes in a format of its own choosing.
var tableFunctions = map[string]Role{
	"numbers": RoleReadOnly, "numbers_mt": RoleReadOnly, "zeros": RoleReadOnly, "zeros_mt": RoleReadOnly,
	"generate_series": RoleReadOnly, "generateSeries": RoleReadOnly, "primes": RoleReadOnly,
	"values": RoleReadOnly, "null": RoleReadOnly, "generateRandom": RoleReadOnly,
	"input": RoleIngest,
}

// tableEngines are the engines a CREATE may name: the MergeTree family the
// schema uses (and its plain siblings), views and materialized views. None
// takes a path, a host or a format; a table's disk is a setting the
// engine's constraints hold constant.
var tableEngines = map[string]bool{
	"MergeTree": true, "ReplacingMergeTree": true, "AggregatingMergeTree": true, "SummingMergeTree": true,
	"CollapsingMergeTree": true, "VersionedCollapsingMergeTree": true, "CoalescingMergeTree": true,
	"View": true, "MaterializedView": true,
}

// deniedFunctions are ordinary functions that reach outside the statement's
// own tables: a file (file), a model on disk through a helper process
// (catboostEvaluate), an inline disk (disk), another table by a name in a
// string (joinGet, hasColumnInTable, dictGet and its kin: there are no
// dictionaries, and none may be created), or the server's configuration.
var deniedFunctions = map[string]bool{
	"file": true, "catboostevaluate": true, "disk": true, "joinget": true, "joingetornull": true,
	"hascolumnintable": true, "getserversetting": true, "getmergetreesetting": true,
	"dictget": true, "dictgetornull": true, "dictgetordefault": true, "dicthas": true,
	"dictgethierarchy": true, "dictgetall": true, "dictgetchildren": true, "dictgetdescendants": true,
	"dictisin": true, "filesystemavailable": true, "filesystemcapacity": true, "filesystemunreserved": true,
	"getmacro": true, "s3": true, "url": true,
}

// deniedFunction: a name in deniedFunctions, or any dictGet* variant.
func deniedFunction(name string) bool {
	n := strings.ToLower(name)
	return deniedFunctions[n] || strings.HasPrefix(n, "dictget")
}

// systemTables are the system tables every role may read: what clients
// ask on connect and what Grafana's query builder and the pipeline-health
// dashboard read. Not processes, query_log and the other logs (everyone's
// query text), users, grants, settings profiles, disks, …
var systemTables = map[string]bool{
	"one": true, "numbers": true, "numbers_mt": true, "zeros": true, "zeros_mt": true,
	"databases": true, "tables": true, "columns": true, "parts": true, "parts_columns": true, "merges": true,
	"functions": true, "data_type_families": true, "table_functions": true, "table_engines": true, "formats": true,
	"settings": true, "merge_tree_settings": true, "time_zones": true, "build_options": true, "collations": true,
	"contributors": true, "licenses": true,
}

// inputFormats are the formats an INSERT may read: self-describing or
// plain-text data that names no file and evaluates nothing. Values is
// among them because the handler forces input_format_values_interpret_expressions
// and input_format_values_deduce_templates_of_expressions off: its rows are
// literals, never expressions (file('/etc/passwd') is a parse error).
// Left out: AvroConfluent (fetches a schema from a registry URL), Template,
// Regexp, CustomSeparated* (their own formats of escaping, and Template's
// files), Protobuf*, CapnProto (a schema file), Form, MySQLDump, DWARF,
// Npy, ParquetMetadata, One, Buffers.
var inputFormats = setOf("Native", "RowBinary", "RowBinaryWithNames", "RowBinaryWithNamesAndTypes", "RowBinaryWithDefaults",
	"RowBinaryWithNamesAndTypesAndDefaults", "TabSeparated", "TabSeparatedRaw", "TabSeparatedWithNames", "TabSeparatedWithNamesAndTypes",
	"TabSeparatedRawWithNames", "TabSeparatedRawWithNamesAndTypes", "TSV", "TSVRaw", "TSVWithNames", "TSVWithNamesAndTypes",
	"TSVRawWithNames", "TSVRawWithNamesAndTypes", "CSV", "CSVWithNames", "CSVWithNamesAndTypes", "JSONEachRow", "JSONLines",
	"JSONL", "NDJSON", "JSONStringsEachRow", "JSONCompactEachRow", "JSONCompactEachRowWithNames", "JSONCompactEachRowWithNamesAndTypes",
	"JSONCompactStringsEachRow", "JSONCompactStringsEachRowWithNames", "JSONCompactStringsEachRowWithNamesAndTypes",
	"JSON", "JSONCompact", "JSONColumns", "JSONCompactColumns", "JSONObjectEachRow", "JSONAsString", "JSONAsObject",
	"Values", "Parquet", "Arrow", "ArrowStream", "ORC", "Avro", "MsgPack", "BSONEachRow", "LineAsString", "RawBLOB", "TSKV")

// outputFormats are the formats a result may be written in. Left out:
// Template (files named by settings), Protobuf*, CapnProto (a schema
// file), Prometheus, MySQLWire, PostgreSQLWire, ODBCDriver2, PNG, Hash,
// SQLInsert, Npy, Buffers, XML.
var outputFormats = setOf("Native", "RowBinary", "RowBinaryWithNames", "RowBinaryWithNamesAndTypes",
	"TabSeparated", "TabSeparatedRaw", "TabSeparatedWithNames", "TabSeparatedWithNamesAndTypes", "TabSeparatedRawWithNames",
	"TabSeparatedRawWithNamesAndTypes", "TSV", "TSVRaw", "TSVWithNames", "TSVWithNamesAndTypes", "TSVRawWithNames",
	"TSVRawWithNamesAndTypes", "CSV", "CSVWithNames", "CSVWithNamesAndTypes", "JSON", "JSONStrings", "JSONCompact",
	"JSONCompactStrings", "JSONColumns", "JSONColumnsWithMetadata", "JSONCompactColumns", "JSONEachRow", "JSONLines", "JSONL",
	"NDJSON", "JSONStringsEachRow", "JSONCompactEachRow", "JSONCompactEachRowWithNames", "JSONCompactEachRowWithNamesAndTypes",
	"JSONCompactStringsEachRow", "JSONCompactStringsEachRowWithNames", "JSONCompactStringsEachRowWithNamesAndTypes",
	"JSONEachRowWithProgress", "JSONStringsEachRowWithProgress", "JSONCompactEachRowWithProgress", "JSONCompactStringsEachRowWithProgress",
	"JSONObjectEachRow", "PrettyJSONEachRow", "PrettyJSONLines", "PrettyNDJSON",
	"Pretty", "PrettyCompact", "PrettyCompactMonoBlock", "PrettyCompactNoEscapes", "PrettyCompactNoEscapesMonoBlock", "PrettyMonoBlock",
	"PrettyNoEscapes", "PrettyNoEscapesMonoBlock", "PrettySpace", "PrettySpaceMonoBlock", "PrettySpaceNoEscapes", "PrettySpaceNoEscapesMonoBlock",
	"Vertical", "Markdown", "MD", "Values", "Null", "Parquet", "Arrow", "ArrowStream", "ORC", "Avro", "MsgPack", "BSONEachRow",
	"LineAsString", "LineAsStringWithNames", "LineAsStringWithNamesAndTypes", "RawBLOB", "Raw", "RawWithNames", "RawWithNamesAndTypes",
	"TSKV", "GeoJSON")

// clientSettings are the settings a client may set (URL parameters or a
// SETTINGS clause) to a value other than the engine's: what the official
// clients and Grafana's data source send, and query tuning that reaches no
// file, host or other user. Every other setting is constant: a client may
// send it at the value it already has, and nothing else.
// max_execution_time is apart: any value from 1 s up to the server's cap.
var clientSettings = setOf(
	// result shape and formats
	"date_time_input_format", "date_time_output_format", "output_format_json_quote_64bit_integers",
	"output_format_json_quote_64bit_floats", "output_format_json_quote_denormals", "output_format_json_quote_decimals",
	"output_format_json_named_tuples_as_objects", "output_format_json_array_of_rows", "output_format_json_validate_utf8",
	"output_format_arrow_string_as_string", "output_format_arrow_low_cardinality_as_dictionary",
	"output_format_parquet_string_as_string", "output_format_native_encode_types_in_binary_format",
	"output_format_decimal_trailing_zeros", "output_format_write_statistics", "output_format_pretty_row_numbers",
	"output_format_pretty_color", "output_format_pretty_max_rows", "output_format_pretty_grid_charset",
	"output_format_csv_crlf_end_of_line", "format_csv_delimiter", "format_csv_allow_single_quotes",
	"format_csv_allow_double_quotes", "format_tsv_null_representation", "format_csv_null_representation",
	"input_format_null_as_default", "input_format_skip_unknown_fields", "input_format_defaults_for_omitted_fields",
	"input_format_tsv_empty_as_default", "input_format_csv_empty_as_default", "input_format_import_nested_json",
	"input_format_json_read_objects_as_strings", "input_format_native_decode_types_in_binary_format",
	"input_format_binary_read_json_as_string", "output_format_binary_write_json_as_string",
	"session_timezone", "use_client_time_zone", "date_time_64_output_format_cut_trailing_zeros_align_to_groups_of_thousands",
	"enable_json_type", "allow_experimental_json_type", "enable_variant_type", "enable_dynamic_type",
	"allow_experimental_variant_type", "allow_experimental_dynamic_type", "allow_experimental_object_type",
	"allow_suspicious_low_cardinality_types", "cast_string_to_dynamic_use_inference", "join_use_nulls", "aggregate_functions_null_for_empty",
	"transform_null_in", "cast_keep_nullable", "union_default_mode", "prefer_column_name_to_alias",
	"allow_experimental_analyzer", "enable_analyzer", "enable_materialized_cte", "enable_http_compression",
	// progress and cancellation over HTTP
	"send_progress_in_http_headers", "http_headers_progress_interval_ms", "cancel_http_readonly_queries_on_client_close",
	"http_wait_end_of_query", "http_response_buffer_size", "send_logs_level", "log_comment", "query_plan_max_step_description_length",
	// limits a client may tighten (the engine's limits are its defaults)
	"max_result_rows", "max_result_bytes", "result_overflow_mode", "max_rows_to_read", "max_bytes_to_read",
	"read_overflow_mode", "max_rows_to_group_by", "group_by_overflow_mode", "max_block_size", "max_insert_block_size",
	"max_threads", "max_memory_usage", "max_query_size", "max_ast_elements", "max_expanded_ast_elements",
	"optimize_aggregation_in_order", "optimize_read_in_order", "optimize_move_to_prewhere", "use_query_cache",
	"final", "do_not_merge_across_partitions_select_final", "allow_experimental_lightweight_delete",
	"lightweight_deletes_sync", "mutations_sync", "alter_sync",
	// inserts (the ingest's exactly-once token)
	"insert_deduplicate", "insert_deduplication_token", "async_insert", "wait_for_async_insert",
	"distributed_foreground_insert", "insert_distributed_sync", "insert_quorum", "insert_null_as_default",
	"date_time_overflow_behavior", "min_insert_block_size_rows", "min_insert_block_size_bytes",
)

// forcedSettings are set by the handler on every statement, for every
// role, after the client's own: the values that keep inputs data and the
// engine inside its own folder. Clients cannot change them (they are not in
// clientSettings), so a SETTINGS clause naming one is refused.
var forcedSettings = [][2]string{
	{"input_format_values_interpret_expressions", "0"},
	{"input_format_values_deduce_templates_of_expressions", "0"},
	{"format_avro_schema_registry_url", ""},
	{"stream_like_engine_allow_direct_select", "0"},
	{"timeout_overflow_mode", "throw"},
	{"max_execution_time_leaf", "0"},
}

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
