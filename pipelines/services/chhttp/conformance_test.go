package chhttp

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The engine's catalogue as classified for this engine (26.7): what
// allowlist.go does not allow, refused on purpose. A row of the catalogue
// in neither list is new (an engine upgrade) and fails
// TestEveryCatalogueRowIsClassifiedAndOnlyTheAllowlistWorks until it is
// classified.
var refusedTableEngines = setOf("Alias", "ArrowStream", "AzureBlobStorage", "AzureQueue", "Buffer", "COSN", "DeltaLake", "DeltaLakeAzure", "DeltaLakeLocal", "DeltaLakeS3", "Dictionary", "Distributed", "EmbeddedRocksDB", "Executable", "ExecutablePool", "File", "FileLog", "FuzzJSON", "FuzzQuery", "GCS", "GenerateRandom", "GraphiteMergeTree", "HDFS", "Hudi", "Iceberg", "IcebergAzure", "IcebergHDFS", "IcebergLocal", "IcebergS3", "JDBC", "Join", "Kafka", "KeeperMap", "Log", "Loop", "MaterializedPostgreSQL", "Memory", "Merge", "MongoDB", "MySQL", "Null", "ODBC", "OSS", "Paimon", "PaimonAzure", "PaimonHDFS", "PaimonLocal", "PaimonS3", "PostgreSQL", "QueryRunner", "Redis", "Remote", "RemoteSecure", "ReplicatedAggregatingMergeTree", "ReplicatedCoalescingMergeTree", "ReplicatedCollapsingMergeTree", "ReplicatedGraphiteMergeTree", "ReplicatedMergeTree", "ReplicatedReplacingMergeTree", "ReplicatedSummingMergeTree", "ReplicatedVersionedCollapsingMergeTree", "S3", "S3Queue", "SQLite", "Set", "StripeLog", "TimeSeries", "TinyLog", "URL", "WindowView", "YTsaurus")

var refusedTableFunctions = setOf("SQLStandardValues", "arrowstream", "azureBlobStorage", "azureBlobStorageCluster", "cluster", "clusterAllReplicas", "cosn", "deltaLake", "deltaLakeAzure", "deltaLakeAzureCluster", "deltaLakeCluster", "deltaLakeLocal", "deltaLakeS3", "deltaLakeS3Cluster", "dictionary", "eval", "executable", "file", "fileCluster", "filesystem", "format", "fuzzJSON", "fuzzQuery", "gcs", "hdfs", "hdfsCluster", "hudi", "hudiCluster", "iceberg", "icebergAzure", "icebergAzureCluster", "icebergCluster", "icebergHDFS", "icebergHDFSCluster", "icebergLocal", "icebergLocalCluster", "icebergS3", "icebergS3Cluster", "jdbc", "loop", "merge", "mergeTreeAnalyzeIndexes", "mergeTreeAnalyzeIndexesUUID", "mergeTreeIndex", "mergeTreeProjection", "mergeTreeTextIndex", "mongodb", "mysql", "odbc", "oss", "paimon", "paimonAzure", "paimonAzureCluster", "paimonCluster", "paimonHDFS", "paimonHDFSCluster", "paimonLocal", "paimonS3", "paimonS3Cluster", "postgresql", "prometheusQuery", "prometheusQueryRange", "redis", "remote", "remoteSecure", "s3", "s3Cluster", "sqlite", "timeSeriesData", "timeSeriesMetrics", "timeSeriesSamples", "timeSeriesSelector", "timeSeriesTags", "url", "urlCluster", "view", "viewExplain", "viewIfPermitted", "ytsaurus")

var refusedFormats = setOf("AvroConfluent", "Buffers", "CustomSeparated", "CustomSeparatedIgnoreSpaces", "CustomSeparatedIgnoreSpacesWithNames", "CustomSeparatedIgnoreSpacesWithNamesAndTypes", "CustomSeparatedWithNames", "CustomSeparatedWithNamesAndTypes", "DWARF", "Form", "Hash", "MySQLDump", "MySQLWire", "Npy", "ODBCDriver2", "One", "PNG", "ParquetMetadata", "PostgreSQLWire", "Prometheus", "Protobuf", "ProtobufList", "ProtobufSingle", "Regexp", "SQLInsert", "Template", "TemplateIgnoreSpaces", "XML")

var roles = []Role{RoleReadOnly, RoleIngest, RoleMigrate}

func catalogue(t *testing.T, st Engine, q string) [][]string {
	t.Helper()
	var out bytes.Buffer
	if err := st.QueryRaw(context.Background(), store.RawStatement{Query: q}, "TSVRaw", &out); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		rows = append(rows, strings.Split(l, "\t"))
	}
	return rows
}

// For each role the gate admits exactly the allowlist of every row of the
// engine's catalogue: table functions, table engines, input and output
// formats, the settings that name a URL, a path or a host, and every kind
// of statement; and every row is classified.
func TestEveryCatalogueRowIsClassifiedAndOnlyTheAllowlistWorks(t *testing.T) {
	st := testenv.ClickHouse(t)
	h := New(st, threeUsers)
	ctx := context.Background()
	if err := st.QueryRaw(ctx, store.RawStatement{Query: "CREATE TABLE t (a String) ENGINE = MergeTree ORDER BY a"}, "TSV", &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, what, q string, role Role, want bool) {
		t.Helper()
		_, ref := h.admit(ctx, st, q, role, nil)
		if got := ref == nil; got != want {
			msg := ""
			if ref != nil {
				msg = ref.err.Message
			}
			t.Errorf("%s as %s: %s admitted = %v, want %v %s", what, role, q, got, want, msg)
		}
	}
	t.Run("table functions", func(t *testing.T) {
		for _, r := range catalogue(t, st, "SELECT name FROM system.table_functions") {
			name := r[0]
			least, allowed := tableFunctions[name]
			if !allowed && !refusedTableFunctions[name] {
				t.Errorf("table function %s is not classified: add it to tableFunctions (allowlist.go) or refusedTableFunctions", name)
			}
			for _, role := range roles {
				check(t, "table function", fmt.Sprintf("SELECT * FROM %s('x', 'y')", name), role, allowed && role >= least)
			}
		}
	})
	t.Run("table engines", func(t *testing.T) {
		for _, r := range catalogue(t, st, "SELECT name FROM system.table_engines") {
			name := r[0]
			if !tableEngines[name] && !refusedTableEngines[name] {
				t.Errorf("table engine %s is not classified: add it to tableEngines (allowlist.go) or refusedTableEngines", name)
			}
			for _, role := range roles {
				check(t, "table engine", fmt.Sprintf("CREATE TABLE e_%s (a String) ENGINE = %s('x', 'y') ORDER BY a", name, name), role, tableEngines[name] && role == RoleMigrate)
			}
		}
	})
	t.Run("formats", func(t *testing.T) {
		for _, r := range catalogue(t, st, "SELECT name, is_input, is_output FROM system.formats") {
			name := r[0]
			if !inputFormats[name] && !outputFormats[name] && !refusedFormats[name] {
				t.Errorf("format %s is not classified: add it to inputFormats, outputFormats (allowlist.go) or refusedFormats", name)
			}
			for _, role := range roles {
				if r[1] == "1" {
					check(t, "input format", "INSERT INTO t FORMAT "+name, role, inputFormats[name] && role >= RoleIngest)
				}
				if r[2] == "1" {
					check(t, "output format", "SELECT 1 FORMAT "+name, role, outputFormats[name])
				}
			}
			if (r[1] != "1" && inputFormats[name]) || (r[2] != "1" && outputFormats[name]) {
				t.Errorf("format %s is allowed in a direction the engine does not have", name)
			}
		}
	})
	t.Run("settings that name a URL, a path or a host", func(t *testing.T) {
		reaching := regexp.MustCompile(`(?i)url|path|host|file|schema|registry|endpoint|disk|directory|dir$|socket|uri|proxy|s3|hdfs|azure|kafka|storage_policy|remote`)
		n := 0
		for _, r := range catalogue(t, st, "SELECT name FROM system.settings") {
			name := r[0]
			if !reaching.MatchString(name) {
				continue
			}
			n++
			if clientSettings[name] {
				t.Errorf("%s names a URL, a path or a host and is a client setting", name)
			}
			for _, role := range roles {
				check(t, "setting", "SELECT 1 SETTINGS "+name+" = 'http://127.0.0.1:1/x'", role, false)
			}
		}
		if n < 50 {
			t.Errorf("only %d settings name a URL, a path or a host: the pattern no longer matches the catalogue", n)
		}
	})
	t.Run("client settings exist", func(t *testing.T) {
		known := map[string]bool{}
		for _, r := range catalogue(t, st, "SELECT name FROM system.settings") {
			known[r[0]] = true
		}
		for name := range clientSettings {
			if !known[name] {
				t.Errorf("client setting %s is not a setting of this engine", name)
			}
		}
		for _, f := range forcedSettings {
			if !known[f[0]] {
				t.Errorf("forced setting %s is not a setting of this engine", f[0])
			}
		}
	})
	t.Run("statement kinds", func(t *testing.T) {
		for _, tc := range []struct {
			q     string
			least Role // 0: refused to every role
		}{
			{"SELECT a FROM t", RoleReadOnly},
			{"SELECT 1 UNION ALL SELECT 2", RoleReadOnly},
			{"SELECT 1 INTERSECT SELECT 1", RoleReadOnly},
			{"WITH x AS (SELECT 1) SELECT * FROM x", RoleReadOnly},
			{"SHOW TABLES", RoleReadOnly},
			{"SHOW DATABASES", RoleReadOnly},
			{"SHOW COLUMNS FROM t", RoleReadOnly},
			{"SHOW CREATE TABLE t", RoleReadOnly},
			{"DESCRIBE TABLE t", RoleReadOnly},
			{"EXISTS TABLE t", RoleReadOnly},
			{"EXPLAIN SELECT 1", RoleReadOnly},
			{"EXPLAIN PIPELINE SELECT a FROM t", RoleReadOnly},
			{"EXPLAIN SYNTAX INSERT INTO t VALUES ('a')", 0}, // the parser wants its data
			{"INSERT INTO t VALUES ('a')", RoleIngest},
			{"INSERT INTO t SELECT 'a'", RoleIngest},
			{"INSERT INTO t SELECT * FROM input('a String') FORMAT CSV", RoleIngest},
			{"DELETE FROM t WHERE a = 'a'", RoleIngest},
			{"CREATE TABLE c (a String) ENGINE = MergeTree ORDER BY a", RoleMigrate},
			{"CREATE VIEW v AS SELECT a FROM t", RoleMigrate},
			{"CREATE MATERIALIZED VIEW mv TO t AS SELECT a FROM t", RoleMigrate},
			{"CREATE DATABASE other", RoleMigrate},
			{"ALTER TABLE t ADD COLUMN b UInt8", RoleMigrate},
			{"ALTER TABLE t MODIFY SETTING index_granularity_bytes = 1024", RoleMigrate},
			{"DROP TABLE t", RoleMigrate},
			{"TRUNCATE TABLE t", RoleMigrate},
			{"RENAME TABLE t TO t2", RoleMigrate},
			{"OPTIMIZE TABLE t FINAL", RoleMigrate},
			{"ATTACH TABLE t", 0},
			{"ATTACH TABLE a FROM 'x/' (a String) ENGINE = MergeTree ORDER BY a", 0},
			{"DETACH TABLE t", 0},
			{"SYSTEM STOP MERGES t", 0},
			{"SYSTEM FLUSH LOGS", 0},
			{"KILL QUERY WHERE 1", 0},
			{"BACKUP TABLE t TO Disk('default', 'x')", 0},
			{"RESTORE TABLE t FROM Disk('default', 'x')", 0},
			{"GRANT SELECT ON *.* TO default", 0},
			{"REVOKE SELECT ON *.* FROM default", 0},
			{"CREATE USER u", 0},
			{"CREATE ROLE r", 0},
			{"CREATE SETTINGS PROFILE p", 0},
			{"CREATE QUOTA q", 0},
			{"CREATE ROW POLICY p ON t USING 1 TO ALL", 0},
			{"CREATE FUNCTION f AS x -> x", 0},
			{"CREATE DICTIONARY d (a String) PRIMARY KEY a SOURCE(CLICKHOUSE(TABLE 't')) LAYOUT(FLAT()) LIFETIME(0)", 0},
			{"CREATE TABLE c2 AS t", RoleMigrate},
			{"CREATE TABLE c3 AS numbers(1)", RoleMigrate},
			{"CREATE TABLE c4 AS file('x', 'CSV')", 0},
			{"CREATE TABLE c5 (a String) ENGINE = Memory", 0},
			{"SHOW PROCESSLIST", 0},
			{"SHOW GRANTS", 0},
			{"SHOW USERS", 0},
			{"SHOW SETTINGS LIKE 'x'", RoleReadOnly}, // system.settings, which every role reads
			{"SET max_threads = 1", 0},
			{"USE system", 0},
			{"BEGIN TRANSACTION", 0},
			{"CHECK TABLE t", 0},
			{"UNDROP TABLE t", 0},
			{"EXCHANGE TABLES t AND t2", RoleMigrate},
			{"MOVE USER u TO 'x'", 0},
			{"SELECT 1 INTO OUTFILE 'x'", 0},
			{"INSERT INTO t FROM INFILE 'x' FORMAT CSV", 0},
			{"SELECT * FROM system.processes", 0},
			{"SELECT * FROM system.query_log", 0},
			{"SELECT name FROM system.tables", RoleReadOnly},
			{"SELECT * FROM other.t", 0},
			{"SELECT file('x')", 0},
			{"SELECT joinGet('t', 'a', 1)", 0},
			{"SELECT dictGet('d', 'a', 1)", 0},
		} {
			for _, role := range roles {
				check(t, "statement", tc.q, role, tc.least != 0 && role >= tc.least)
			}
		}
	})
}
