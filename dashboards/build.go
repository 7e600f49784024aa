package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spikehunt/spikehunt/internal/vocab"
)

// The data source every panel uses, through the ${datasource} variable.
const (
	DatasourceType = vocab.DataSourceType
	DatasourceUID  = vocab.DataSourceUID
	// schemaVersion is the dashboard JSON model version these dashboards are
	// written in (Grafana 11–13 read it without migrating).
	schemaVersion = 41
)

// Format is the data source's result format for a target.
type Format int

// The ClickHouse data source's formats (sqlutil.FormatQueryOption).
const (
	TimeSeries Format = 0 // long rows (time, labels…, values) become one series per label set
	Table      Format = 1
)

// Board is one dashboard.
type Board struct {
	UID         string // stable: links and provisioning name it
	Title       string
	File        string // grafana/<File>.json
	Description string
	Tags        []string
	From        string // default time range start, e.g. "now-6h"
	Refresh     string
	Vars        []Var
	Annotations []Annotation
	Rows        []Row
}

// Row is a titled band of panels, laid out left to right on Grafana's
// 24-column grid and wrapped.
type Row struct {
	Title  string
	Panels []Panel
}

// Panel is one visualization and its query.
type Panel struct {
	Key         string // names the panel in links: {{panel:KEY}} becomes its id
	Title       string
	Type        string // a Grafana core panel plugin id: timeseries, heatmap, table, stat, bargauge, text
	Description string
	W, H        int
	SQL         string // empty for text panels
	Format      Format
	Unit        string
	Min, Max    *float64
	Decimals    *int
	Options     map[string]any // the panel plugin's options
	Custom      map[string]any // fieldConfig.defaults.custom
	Defaults    map[string]any // other fieldConfig.defaults entries
	Overrides   []any          // extra fieldConfig overrides
	// Columns, for tables: the query's columns, in order. The test checks the
	// query returns exactly these.
	Columns []Column
	Links   []DataLink // on every field
	// Interval is the panel's minimum $__interval ("10s").
	Interval string
}

// Column is one column of a table panel.
type Column struct {
	Name   string // as the query returns it
	Title  string // header; empty = Name
	Unit   string
	Hidden bool // kept for data links, not shown
	Links  []DataLink
	Width  int
	Cell   map[string]any // custom.cellOptions
}

// DataLink is a link on a value. URL may use Grafana's ${__data.fields.X},
// ${__value.raw}, ${__url_time_range} and dashboard variables.
type DataLink struct {
	Title  string
	URL    string
	NewTab bool
}

// Var is a dashboard variable.
type Var struct {
	Name, Label string
	Type        string // query, datasource, custom, textbox, constant
	SQL         string // query variables
	Multi       bool
	IncludeAll  bool
	Default     string
	Hidden      bool
	Description string
	Options     []string // custom variables: the values offered, Default among them
}

// Annotation is a SQL annotation query: it returns time, timeEnd and text.
type Annotation struct {
	Name  string
	SQL   string
	Color string
}

func ds() map[string]any { return map[string]any{"type": DatasourceType, "uid": "${datasource}"} }

// target is one panel query in the data source's JSON model.
func target(sql string, f Format) map[string]any {
	qt := "timeseries"
	if f == Table {
		qt = "table"
	}
	return map[string]any{
		"refId": "A", "datasource": ds(), "editorType": "sql", "format": int(f), "queryType": qt,
		"rawSql": strings.TrimSpace(sql),
	}
}

func links(ls []DataLink) []any {
	out := make([]any, 0, len(ls))
	for _, l := range ls {
		m := map[string]any{"title": l.Title, "url": l.URL}
		if l.NewTab {
			m["targetBlank"] = true
		}
		out = append(out, m)
	}
	return out
}

// JSON renders the dashboard as Grafana loads it: stable key order, two
// spaces, no HTML escaping (the SQL has < and >), a final newline.
func (b Board) JSON() ([]byte, error) {
	m, err := b.model()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	out := buf.Bytes()
	for key, id := range b.panelIDs() {
		out = bytes.ReplaceAll(out, []byte("{{panel:"+key+"}}"), []byte(fmt.Sprint(id)))
	}
	if i := bytes.Index(out, []byte("{{panel:")); i >= 0 {
		return nil, fmt.Errorf("dashboard %s: a link names an unknown panel: %.40s", b.UID, out[i:])
	}
	return out, nil
}

// panelIDs maps each keyed panel to the id model gives it: rows and panels
// are numbered in order from 1.
func (b Board) panelIDs() map[string]int {
	ids := map[string]int{}
	id := 1
	for _, r := range b.Rows {
		id++
		for _, p := range r.Panels {
			if p.Key != "" {
				ids[p.Key] = id
			}
			id++
		}
	}
	return ids
}

func (b Board) model() (map[string]any, error) {
	var panels []any
	id, y := 1, 0
	for _, r := range b.Rows {
		panels = append(panels, map[string]any{
			"type": "row", "id": id, "title": r.Title, "collapsed": false, "panels": []any{},
			"gridPos": map[string]any{"h": 1, "w": 24, "x": 0, "y": y},
		})
		id++
		y++
		x, rowH := 0, 0
		for _, p := range r.Panels {
			if p.W <= 0 || p.W > 24 || p.H <= 0 {
				return nil, fmt.Errorf("dashboard %s: panel %q: size %d×%d", b.UID, p.Title, p.W, p.H)
			}
			if x+p.W > 24 {
				x, y, rowH = 0, y+rowH, 0
			}
			pm, err := p.model(id, x, y)
			if err != nil {
				return nil, fmt.Errorf("dashboard %s: %w", b.UID, err)
			}
			panels = append(panels, pm)
			id++
			x += p.W
			rowH = max(rowH, p.H)
		}
		y += rowH
	}
	vars := []any{map[string]any{
		"name": "datasource", "label": "Data source", "type": "datasource", "query": DatasourceType,
		"current": map[string]any{"text": DatasourceUID, "value": DatasourceUID}, "hide": 0,
		"refresh": 1, "regex": "", "options": []any{},
		"description": "The ClickHouse data source holding the spikehunt schema (provisioned as " + DatasourceUID + ")",
	}}
	for _, v := range b.Vars {
		vars = append(vars, v.model())
	}
	annotations := []any{map[string]any{
		"builtIn": 1, "datasource": map[string]any{"type": "grafana", "uid": "-- Grafana --"},
		"enable": true, "hide": true, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
		"type": "dashboard",
	}}
	for _, a := range b.Annotations {
		annotations = append(annotations, map[string]any{
			"name": a.Name, "datasource": ds(), "enable": true, "hide": false, "iconColor": a.Color,
			"target": target(a.SQL, Table),
		})
	}
	from := b.From
	if from == "" {
		from = "now-6h"
	}
	return map[string]any{
		"uid": b.UID, "title": b.Title, "description": b.Description, "tags": b.Tags,
		"editable": true, "graphTooltip": 1, "timezone": "utc", "schemaVersion": schemaVersion, "version": 1,
		"fiscalYearStartMonth": 0, "liveNow": false, "refresh": b.Refresh,
		"time":        map[string]any{"from": from, "to": "now"},
		"timepicker":  map[string]any{},
		"templating":  map[string]any{"list": vars},
		"annotations": map[string]any{"list": annotations},
		"links": []any{map[string]any{
			"title": "spikehunt", "type": "dashboards", "tags": []any{"spikehunt"}, "asDropdown": true,
			"includeVars": true, "keepTime": true, "icon": "external link", "targetBlank": false,
			"tooltip": "", "url": "",
		}},
		"panels": panels,
	}, nil
}

func (v Var) model() map[string]any {
	m := map[string]any{
		"name": v.Name, "label": v.Label, "type": v.Type, "description": v.Description,
		"multi": v.Multi, "includeAll": v.IncludeAll, "hide": 0, "options": []any{}, "skipUrlSync": false,
	}
	if v.Hidden {
		m["hide"] = 2
	}
	cur := map[string]any{"text": v.Default, "value": v.Default}
	if v.IncludeAll && (v.Default == "" || v.Default == "All") {
		cur = map[string]any{"text": []any{"All"}, "value": []any{"$__all"}}
	}
	m["current"] = cur
	switch v.Type {
	case "query":
		sql := strings.TrimSpace(v.SQL)
		m["datasource"] = ds()
		m["query"] = sql
		m["refresh"] = 2 // on time range change: the list follows the hosts that reported
		m["sort"] = 1
		m["regex"] = ""
	case "textbox", "constant":
		m["query"] = v.Default
	case "custom":
		opts := make([]any, len(v.Options))
		for i, o := range v.Options {
			opts[i] = map[string]any{"text": o, "value": o, "selected": o == v.Default}
		}
		m["options"] = opts
		m["query"] = strings.Join(v.Options, ",")
	}
	return m
}

func (p Panel) model(id, x, y int) (map[string]any, error) {
	m := map[string]any{
		"id": id, "type": p.Type, "title": p.Title, "description": p.Description,
		"gridPos": map[string]any{"h": p.H, "w": p.W, "x": x, "y": y},
	}
	opts := p.Options
	if opts == nil {
		opts = map[string]any{}
	}
	m["options"] = opts
	if p.Type == "text" {
		if p.SQL != "" {
			return nil, fmt.Errorf("panel %q: a text panel has no query", p.Title)
		}
		return m, nil
	}
	if p.SQL == "" {
		return nil, fmt.Errorf("panel %q: no query", p.Title)
	}
	m["datasource"] = ds()
	m["targets"] = []any{target(p.SQL, p.Format)}
	if p.Interval != "" {
		m["interval"] = p.Interval
	}
	defaults := map[string]any{}
	for k, v := range p.Defaults {
		defaults[k] = v
	}
	if p.Unit != "" {
		defaults["unit"] = p.Unit
	}
	if p.Min != nil {
		defaults["min"] = *p.Min
	}
	if p.Max != nil {
		defaults["max"] = *p.Max
	}
	if p.Decimals != nil {
		defaults["decimals"] = *p.Decimals
	}
	if p.Custom != nil {
		defaults["custom"] = p.Custom
	}
	if len(p.Links) > 0 {
		defaults["links"] = links(p.Links)
	}
	overrides := []any{}
	if len(p.Columns) > 0 {
		if p.Type != "table" {
			return nil, fmt.Errorf("panel %q: columns are for tables", p.Title)
		}
		index, rename := map[string]any{}, map[string]any{}
		for i, c := range p.Columns {
			index[c.Name] = i
			if c.Title != "" {
				rename[c.Name] = c.Title
			}
			var props []any
			if c.Unit != "" {
				props = append(props, map[string]any{"id": "unit", "value": c.Unit})
			}
			if c.Hidden {
				props = append(props, map[string]any{"id": "custom.hidden", "value": true})
			}
			if len(c.Links) > 0 {
				props = append(props, map[string]any{"id": "links", "value": links(c.Links)})
			}
			if c.Width > 0 {
				props = append(props, map[string]any{"id": "custom.width", "value": c.Width})
			}
			if c.Cell != nil {
				props = append(props, map[string]any{"id": "custom.cellOptions", "value": c.Cell})
			}
			if props != nil {
				overrides = append(overrides, map[string]any{
					"matcher": map[string]any{"id": "byName", "options": c.Name}, "properties": props,
				})
			}
		}
		m["transformations"] = []any{map[string]any{"id": "organize", "options": map[string]any{
			"indexByName": index, "renameByName": rename, "excludeByName": map[string]any{},
		}}}
	} else if p.Type == "table" {
		return nil, fmt.Errorf("panel %q: a table names its columns", p.Title)
	}
	overrides = append(overrides, p.Overrides...)
	m["fieldConfig"] = map[string]any{"defaults": defaults, "overrides": overrides}
	return m, nil
}

func ptr[T any](v T) *T { return &v }

// Boards returns every dashboard, in a stable order.
func Boards() []Board {
	return []Board{fleetOverview(), hostDrilldown(), capturesIndex(), pipelineHealth()}
}

// lines makes p a time series of lines, one per value of the query's
// label column, named by it, with the area under each filled to fill %.
func lines(p Panel, label string, fill int) Panel {
	p.Type, p.Format = "timeseries", TimeSeries
	p.Defaults = map[string]any{"displayName": "${__field.labels." + label + "}"}
	p.Custom = map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": fill, "showPoints": "never"}
	p.Options = timeseriesOptions()
	return p
}
