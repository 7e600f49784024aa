package vocab

// The Grafana data source the dashboards query: `spikehunt grafana`
// provisions it and every panel names it through ${datasource}.
const (
	DataSourceUID  = "spikehunt-clickhouse"
	DataSourceType = "grafana-clickhouse-datasource"
)
