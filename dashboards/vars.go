package dashboards

// The variables every dashboard shares, and the SQL fragments that apply
// them. A multi-value variable goes through $__conditionalAll, so that "All"
// adds no condition at all (1=1) instead of a list of every host.
const (
	whereService = "service = '${service}'"
	whereHWClass = "$__conditionalAll(hw_class IN (${hw_class:singlequote}), $hw_class)"
	whereHosts   = "$__conditionalAll(host IN (${host:singlequote}), $host)"
	whereHost    = "host = '${host}'"
)

// latencyTable is latency_1s, or its per-minute rollup latency_1m when
// the panel's interval is a minute or more: the same columns, 60× fewer
// digests to merge over a fleet-day. The branch not taken reads nothing
// (its WHERE is a constant false).
const latencyTable = `(
    SELECT * FROM latency_1m WHERE $__interval_s >= 60
    UNION ALL
    SELECT * FROM latency_1s WHERE $__interval_s < 60
)`

var (
	serviceVar = Var{Name: "service", Label: "Service", Type: "query", Default: "checkout",
		Description: "The service whose requests are shown",
		SQL:         `SELECT DISTINCT service FROM latency_1m WHERE $__timeFilter(ts) ORDER BY service`}
	hwClassVar = Var{Name: "hw_class", Label: "Hardware class", Type: "query", Multi: true, IncludeAll: true,
		Description: "The hosts' hardware class (the spikehunt.hw_class node label)",
		SQL:         `SELECT DISTINCT hw_class FROM latency_1m WHERE ` + whereService + ` AND $__timeFilter(ts) ORDER BY hw_class`}
	hostsVar = Var{Name: "host", Label: "Host", Type: "query", Multi: true, IncludeAll: true,
		Description: "Hosts of the service (of the chosen hardware classes)",
		SQL: `SELECT DISTINCT host FROM latency_1m WHERE ` + whereService + ` AND $__timeFilter(ts) AND ` + whereHWClass +
			` ORDER BY host`}
	// topVar bounds the host × time heatmaps to the hosts with the most
	// spike windows: 300 rows in a panel leave each host under two pixels,
	// and the hosts' table and the figures above count every host anyway.
	topVar = Var{Name: "top", Label: "Hosts shown", Type: "custom", Default: "40",
		Options:     []string{"20", "40", "80", "150", "300", "1000"},
		Description: "How many hosts the heatmaps draw: those with the most spike windows in the range (then the slowest)"}
	hostVar = Var{Name: "host", Label: "Host", Type: "query",
		Description: "The host to drill into",
		SQL: `SELECT DISTINCT host FROM latency_1m WHERE ` + whereService + ` AND $__timeFilter(ts) AND ` + whereHWClass +
			` ORDER BY host`}
)

// whereTopHosts keeps the ${top} hosts (of those the other variables
// select) with the most spike windows in the range, ties broken by the
// slowest request, then by name; a host without spikes still has a row
// when fewer than ${top} spike.
const whereTopHosts = `host IN (
    SELECT h.host
    FROM (
        SELECT host, max(max_us) AS worst FROM latency_1m
        WHERE ` + whereService + ` AND $__timeFilter(ts) AND ` + whereHWClass + ` AND ` + whereHosts + `
        GROUP BY host
    ) AS h
    LEFT JOIN (
        SELECT host, count() AS n FROM spikes FINAL
        WHERE ` + whereService + ` AND is_deleted = 0 AND $__timeFilter(window_start) AND ` + whereHWClass + ` AND ` + whereHosts + `
        GROUP BY host
    ) AS s ON s.host = h.host
    ORDER BY s.n DESC, h.worst DESC, h.host
    LIMIT ${top}
)`

// Links between the dashboards: pattern → hosts → host drill-down →
// captures. They carry the service, the host and the time range.
const (
	linkHost = "/d/spikehunt-host/spikehunt-host-drill-down?var-service=${__data.fields.service}" +
		"&var-host=${__data.fields.host}&${__url_time_range}"
	linkHostCaptures = "/d/spikehunt-captures/spikehunt-captures?var-service=${service}&var-host=${host}&${__url_time_range}"
	// A spike, in the host drill-down, five minutes either side.
	linkSpike = "/d/spikehunt-host/spikehunt-host-drill-down?var-service=${__data.fields.service}" +
		"&var-host=${__data.fields.host}&from=${__data.fields.link_from}&to=${__data.fields.link_to}"
	// A capture's report on the operator's report server
	// (operator/internal/report), from the Capture object the row names;
	// :raw keeps Grafana from escaping the base URL's "://".
	linkReport = "${report_base:raw}/captures/${__data.fields.capture_namespace}/${__data.fields.capture_name}/report"
)

// DefaultReportBase is report_base when nothing sets it: the operator's
// report Service through `kubectl port-forward svc/<release>-operator-report
// 8090`. The Helm chart replaces it with operator.reportServer.publicURL
// when it provisions the dashboards.
const DefaultReportBase = "http://localhost:8090"

// reportBaseVar is where the report server is, as a browser reaches it.
var reportBaseVar = Var{Name: "report_base", Label: "Report server", Type: "textbox", Default: DefaultReportBase,
	Description: "Base URL of the spikehunt operator's report server (operator.reportServer in the Helm chart), as your browser reaches it: " +
		"the artifact links open ${report_base}/captures/<namespace>/<name>/report, behind its own sign-in"}
