package dashboards

import (
	"regexp"
	"strings"
	"testing"
)

var (
	linkTarget = regexp.MustCompile(`^/d/([a-z0-9-]+)/[a-z0-9-]+\?(.*)$`)
	linkField  = regexp.MustCompile(`\$\{__data\.fields\.([a-z_0-9]+)\}`)
	linkVar    = regexp.MustCompile(`\$\{([a-z_]+)(?::[a-z]+)?\}`)
)

// panelLinks lists a panel's data links: on every field, and per column.
func panelLinks(p Panel) []DataLink {
	out := append([]DataLink(nil), p.Links...)
	for _, c := range p.Columns {
		out = append(out, c.Links...)
	}
	return out
}

// TestLinks follows every data link: pattern → hosts → host drill-down →
// captures must land on a dashboard that exists, set only variables it
// has, and use only variables of the dashboard it starts from.
func TestLinks(t *testing.T) {
	vars := map[string]map[string]bool{}
	panels := map[string]map[string]bool{}
	for _, b := range Boards() {
		vars[b.UID] = map[string]bool{"datasource": true}
		for _, v := range b.Vars {
			vars[b.UID][v.Name] = true
		}
		panels[b.UID] = map[string]bool{}
		for _, r := range b.Rows {
			for _, p := range r.Panels {
				panels[b.UID][p.Key] = true
			}
		}
	}
	hops := map[string]bool{}
	for _, b := range Boards() {
		for _, r := range b.Rows {
			for _, p := range r.Panels {
				for _, l := range panelLinks(p) {
					for _, m := range linkVar.FindAllStringSubmatch(l.URL, -1) {
						if !strings.HasPrefix(m[1], "__") && !vars[b.UID][m[1]] {
							t.Errorf("%s/%s: link %q uses ${%s}, not a variable of %s", b.UID, p.Key, l.URL, m[1], b.UID)
						}
					}
					if l.URL == linkReport {
						continue
					}
					m := linkTarget.FindStringSubmatch(l.URL)
					if m == nil {
						t.Errorf("%s/%s: link %q is not a dashboard link", b.UID, p.Key, l.URL)
						continue
					}
					target := m[1]
					if vars[target] == nil {
						t.Errorf("%s/%s: link to unknown dashboard %s", b.UID, p.Key, target)
						continue
					}
					hops[b.UID+" → "+target] = true
					for _, kv := range strings.Split(m[2], "&") {
						if name, ok := strings.CutPrefix(kv, "var-"); ok {
							name, _, _ = strings.Cut(name, "=")
							if !vars[target][name] {
								t.Errorf("%s/%s: link sets var-%s, which %s does not have", b.UID, p.Key, name, target)
							}
						}
						if key, ok := strings.CutPrefix(kv, "viewPanel={{panel:"); ok && !panels[target][strings.TrimSuffix(key, "}}")] {
							t.Errorf("%s/%s: link views panel %s, not in %s", b.UID, p.Key, key, target)
						}
					}
				}
			}
		}
	}
	for _, want := range []string{"spikehunt-fleet → spikehunt-fleet", "spikehunt-fleet → spikehunt-host",
		"spikehunt-host → spikehunt-captures", "spikehunt-captures → spikehunt-host"} {
		if !hops[want] {
			t.Errorf("no data link %s (pattern → hosts → host drill-down → captures → spike)", want)
		}
	}
}

// linkFields are the result columns a panel's links read.
func linkFields(p Panel) []string {
	var out []string
	for _, l := range panelLinks(p) {
		for _, m := range linkField.FindAllStringSubmatch(l.URL, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// The artifact column of the Captures index and of the host drill-down
// opens the capture's report on the operator's report server
// (operator/internal/report answers GET /captures/{namespace}/{name}/report),
// at ${report_base}, a variable the Helm chart sets; the raw URI stays
// the cell's text. Before, the link was the s3:// or file:// URI itself,
// which no browser opens.
func TestTheArtifactLinkOpensTheReportOnTheReportServer(t *testing.T) {
	want := "${report_base:raw}/captures/${__data.fields.capture_namespace}/${__data.fields.capture_name}/report"
	for _, c := range []struct{ board, panel string }{{"spikehunt-captures", "index"}, {"spikehunt-host", "host-captures"}} {
		var board *Board
		for _, b := range Boards() {
			if b.UID == c.board {
				board = &b
			}
		}
		if board == nil {
			t.Fatalf("no board %s", c.board)
		}
		var base *Var
		for i, v := range board.Vars {
			if v.Name == "report_base" {
				base = &board.Vars[i]
			}
		}
		if base == nil || base.Type != "textbox" || base.Default != DefaultReportBase {
			t.Errorf("%s: report_base %+v, want a textbox defaulting to %s", c.board, base, DefaultReportBase)
		}
		var found bool
		for _, r := range board.Rows {
			for _, p := range r.Panels {
				if p.Key != c.panel {
					continue
				}
				cols := map[string]Column{}
				for _, col := range p.Columns {
					cols[col.Name] = col
				}
				uri := cols["uri"]
				if uri.Hidden || len(uri.Links) != 1 || uri.Links[0].URL != want || !uri.Links[0].NewTab {
					t.Errorf("%s/%s: the uri column %+v, want it shown with one link %s in a new tab", c.board, c.panel, uri, want)
				}
				for _, f := range []string{"capture_namespace", "capture_name"} {
					if _, ok := cols[f]; !ok || !strings.Contains(p.SQL, f) {
						t.Errorf("%s/%s: the query does not return %s", c.board, c.panel, f)
					}
				}
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no panel %s", c.board, c.panel)
		}
	}
}
