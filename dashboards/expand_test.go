package dashboards

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

// grafanaQuery is what Grafana and the ClickHouse data source do to a
// panel's rawSql before ClickHouse sees it: the front end applies
// $__conditionalAll and the dashboard variables, the back end the time
// macros (grafana/clickhouse-datasource pkg/macros; DEPS.md lists them).
type grafanaQuery struct {
	From, To time.Time
	Interval time.Duration   // $__interval: Grafana's, from the range and the panel's width
	Vars     map[string]any  // a string, or []string for a multi-value variable
	All      map[string]bool // variables set to "All"
}

// autoInterval is Grafana's $__interval for a range drawn across about
// 1,000 pixels, rounded to its steps; minInterval is the panel's floor.
func autoInterval(from, to time.Time, minInterval time.Duration) time.Duration {
	raw := to.Sub(from) / 1000
	steps := []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
		20 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
		15 * time.Minute, 20 * time.Minute, 30 * time.Minute, time.Hour}
	for _, s := range steps {
		if s >= raw {
			return max(s, minInterval)
		}
	}
	return max(time.Hour, minInterval)
}

var (
	macroName = regexp.MustCompile(`\$__([A-Za-z_]+)`)
	varRef    = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([a-z]+))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
)

// Expand returns the SQL ClickHouse would run.
func (q grafanaQuery) Expand(sql string) (string, error) {
	sql, err := q.conditionalAll(sql)
	if err != nil {
		return "", err
	}
	if sql, err = q.variables(sql); err != nil {
		return "", err
	}
	return q.macros(sql)
}

// args splits the parenthesized arguments starting at s[0] == '(' and
// returns them and the length consumed.
func args(s string) ([]string, int, error) {
	if s == "" || s[0] != '(' {
		return nil, 0, nil
	}
	depth, start := 0, 1
	var out []string
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			inQuote = !inQuote
		case inQuote:
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return append(out, strings.TrimSpace(s[start:i])), i + 1, nil
			}
		case c == ',' && depth == 1:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return nil, 0, fmt.Errorf("unbalanced parentheses after %.30q", s)
}

// conditionalAll: $__conditionalAll(condition, $var) is the condition, or
// 1=1 when the variable selects every value.
func (q grafanaQuery) conditionalAll(sql string) (string, error) {
	const name = "$__conditionalAll"
	for {
		i := strings.Index(sql, name)
		if i < 0 {
			return sql, nil
		}
		a, n, err := args(sql[i+len(name):])
		if err != nil || len(a) != 2 {
			return "", fmt.Errorf("$__conditionalAll wants (condition, $variable): %.60q", sql[i:])
		}
		v := strings.TrimPrefix(strings.Trim(a[1], "${}"), "$")
		if _, ok := q.Vars[v]; !ok && !q.All[v] {
			return "", fmt.Errorf("$__conditionalAll names an unknown variable %s", a[1])
		}
		repl := a[0]
		if q.All[v] {
			repl = "1=1"
		}
		sql = sql[:i] + repl + sql[i+len(name)+n:]
	}
}

// variables interpolates $var, ${var} and ${var:singlequote|sqlstring|csv}.
// Grafana's own $__ variables are left for the macros.
func (q grafanaQuery) variables(sql string) (string, error) {
	var err error
	out := varRef.ReplaceAllStringFunc(sql, func(m string) string {
		p := varRef.FindStringSubmatch(m)
		name, format := p[1], p[2]
		if name == "" {
			name = p[3]
		}
		if strings.HasPrefix(name, "__") {
			return m
		}
		val, ok := q.Vars[name]
		if !ok {
			err = fmt.Errorf("unknown variable %s", m)
			return m
		}
		var vals []string
		switch v := val.(type) {
		case string:
			vals = []string{v}
		case []string:
			vals = v
		}
		quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }
		switch format {
		case "singlequote", "sqlstring":
			qs := make([]string, len(vals))
			for i, v := range vals {
				qs[i] = quote(v)
			}
			return strings.Join(qs, ",")
		case "", "csv", "raw":
			return strings.Join(vals, ",")
		}
		err = fmt.Errorf("unknown variable format %s", m)
		return m
	})
	return out, err
}

// macros applies the data source's time macros.
func (q grafanaQuery) macros(sql string) (string, error) {
	dt := func(t time.Time) string { return fmt.Sprintf("toDateTime(%d)", t.Unix()) }
	dt64 := func(t time.Time) string { return fmt.Sprintf("fromUnixTimestamp64Milli(%d)", t.UnixMilli()) }
	date := func(t time.Time) string { return fmt.Sprintf("toDate('%s')", t.UTC().Format("2006-01-02")) }
	secs := int(math.Max(q.Interval.Seconds(), 1))
	ms := int(math.Max(float64(q.Interval.Milliseconds()), 1))
	var b strings.Builder
	for {
		loc := macroName.FindStringSubmatchIndex(sql)
		if loc == nil {
			b.WriteString(sql)
			return b.String(), nil
		}
		b.WriteString(sql[:loc[0]])
		name := sql[loc[2]:loc[3]]
		rest := sql[loc[1]:]
		a, n, err := args(rest)
		if err != nil {
			return "", err
		}
		one := func() (string, error) {
			if len(a) != 1 || a[0] == "" {
				return "", fmt.Errorf("$__%s wants one argument", name)
			}
			return a[0], nil
		}
		var repl string
		switch name {
		case "fromTime":
			repl = dt(q.From)
		case "toTime":
			repl = dt(q.To)
		case "fromTime_ms":
			repl = dt64(q.From)
		case "toTime_ms":
			repl = dt64(q.To)
		case "interval_s":
			repl = fmt.Sprint(secs)
		case "timeFilter", "timeFilter_ms", "dateFilter", "timeInterval", "timeInterval_ms":
			c, err := one()
			if err != nil {
				return "", err
			}
			switch name {
			case "timeFilter":
				repl = fmt.Sprintf("%s >= %s AND %s <= %s", c, dt(q.From), c, dt(q.To))
			case "timeFilter_ms":
				repl = fmt.Sprintf("%s >= %s AND %s <= %s", c, dt64(q.From), c, dt64(q.To))
			case "dateFilter":
				repl = fmt.Sprintf("%s >= %s AND %s <= %s", c, date(q.From), c, date(q.To))
			case "timeInterval":
				repl = fmt.Sprintf("toStartOfInterval(toDateTime(%s), INTERVAL %d second)", c, secs)
			case "timeInterval_ms":
				repl = fmt.Sprintf("toStartOfInterval(toDateTime64(%s, 3), INTERVAL %d millisecond)", c, ms)
			}
		default:
			return "", fmt.Errorf("unknown macro $__%s", name)
		}
		b.WriteString(repl)
		sql = rest[n:]
	}
}

func TestExpand(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	q := grafanaQuery{From: from, To: from.Add(time.Hour), Interval: 20 * time.Second,
		Vars: map[string]any{"service": "checkout", "host": []string{"a", "b'c"}, "hw_class": []string{"gen4", "gen5"}},
		All:  map[string]bool{"hw_class": true}}
	for _, tt := range []struct{ in, want string }{
		{"$__timeFilter(ts)", "ts >= toDateTime(1700000000) AND ts <= toDateTime(1700003600)"},
		{"$__timeFilter_ms(ts)", "ts >= fromUnixTimestamp64Milli(1700000000000) AND ts <= fromUnixTimestamp64Milli(1700003600000)"},
		{"$__timeInterval(ts) AS time", "toStartOfInterval(toDateTime(ts), INTERVAL 20 second) AS time"},
		{"$__timeInterval_ms(ts)", "toStartOfInterval(toDateTime64(ts, 3), INTERVAL 20000 millisecond)"},
		{"x / $__interval_s", "x / 20"},
		{"$__fromTime - $__toTime", "toDateTime(1700000000) - toDateTime(1700003600)"},
		{"service = '${service}'", "service = 'checkout'"},
		{"$__conditionalAll(host IN (${host:singlequote}), $host)", `host IN ('a','b\'c')`},
		{"$__conditionalAll(hw_class IN (${hw_class:singlequote}), $hw_class)", "1=1"},
		{"f(g(1), 2) AND $__conditionalAll(x IN (1, (2)), $host) AND y", "f(g(1), 2) AND x IN (1, (2)) AND y"},
	} {
		got, err := q.Expand(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"$__nope(x)", "${nope}", "$__timeFilter()", "$__timeFilter(a, b)", "$__conditionalAll(x, $nope)", "$__timeFilter(ts"} {
		if got, err := q.Expand(bad); err == nil {
			t.Errorf("Expand(%q) = %q, want an error", bad, got)
		}
	}
	if got := autoInterval(from, from.Add(6*time.Hour), 0); got != 30*time.Second {
		t.Errorf("6 h interval %s", got)
	}
}
