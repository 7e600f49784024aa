// Package dashboards is the one source of truth for spikehunt's Grafana
// dashboards. Each dashboard is written here as Go: its variables, its
// panels with their SQL for the official ClickHouse data source
// (grafana-clickhouse-datasource), their layout and their data links. The
// JSON Grafana loads, grafana/*.json, is generated from it:
//
//	go test ./dashboards -run TestGenerated -update   (or: make dashboards)
//
// and a test fails when the committed JSON is stale. The Helm chart carries
// byte-identical copies of grafana/*.json.
//
// Conventions every panel follows, so that the dashboards work unchanged on
// a ClickHouse server, a cluster, and `spikehunt serve-clickhouse`:
//   - table names are unqualified: the data source's default database
//     (spikehunt) names the schema;
//   - the data source is the ${datasource} variable, whose default is the
//     provisioned uid spikehunt-clickhouse (native or HTTP protocol, see
//     provisioning/);
//   - time filters go through the data source's macros ($__timeFilter,
//     $__timeInterval, $__interval_s) on the table's ordering column, so
//     that the primary key prunes the read;
//   - time series return a `time` column first; annotations return
//     time, timeEnd and text; tables return exactly the columns their
//     organize transformation names.
package dashboards
