package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The dashboards are checked against Grafana's own schema: the TypeScript
// types of @grafana/schema (the Dashboard model and each panel plugin's
// Options and FieldConfig), compiled with tsc in strict mode, so that an
// unknown key, a wrong type or a misspelt enum value fails. Grafana's types
// cannot say which panel types exist or which data source a panel uses;
// checkStructure does.

// schemaDir is where deps/install.sh put @grafana/schema and typescript.
func schemaDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SPIKEHUNT_GRAFANA_SCHEMA")
	if dir == "" {
		t.Fatal("SPIKEHUNT_GRAFANA_SCHEMA is not set: run `make deps` (deps/install.sh grafana-schema), or the tests through make")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@grafana", "schema", "package.json")); err != nil {
		t.Fatalf("@grafana/schema is not installed in %s: run deps/install.sh grafana-schema (%v)", dir, err)
	}
	return dir
}

// panelTypes lists Grafana's core panel plugins: the composable folders of
// @grafana/schema that have a panel configuration, plus rows.
func panelTypes(t *testing.T, dir string) map[string]string {
	t.Helper()
	root := filepath.Join(dir, "node_modules", "@grafana", "schema")
	pkg, err := os.ReadFile(filepath.Join(root, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The package exports each panel's types under a path naming the panel.
	re := regexp.MustCompile(`"\./dist/esm/raw/composable/([a-z0-9]+)/panelcfg/x/([A-Za-z0-9]+)_types\.gen"`)
	types := map[string]string{"row": ""}
	for _, m := range re.FindAllStringSubmatch(string(pkg), -1) {
		types[m[1]] = "@grafana/schema/dist/esm/raw/composable/" + m[1] + "/panelcfg/x/" + m[2] + "_types.gen"
	}
	if len(types) < 20 {
		t.Fatalf("found only %d panel types in %s: has the package's layout changed?", len(types), root)
	}
	return types
}

// tsProgram writes one TypeScript file per dashboard (and the extra ones
// given), each assigning the JSON to Grafana's types, and returns tsc's
// diagnostics by file.
func tsProgram(t *testing.T, dir string, types map[string]string, files map[string][]byte) map[string][]string {
	t.Helper()
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	var names []string
	for name, js := range files {
		src, err := tsSource(name, js, types)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ts := strings.TrimSuffix(name, ".json") + ".ts"
		if err := os.WriteFile(filepath.Join(work, ts), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, ts)
	}
	sort.Strings(names)
	cfg, _ := json.Marshal(map[string]any{
		"compilerOptions": map[string]any{"strict": true, "noEmit": true, "target": "es2022", "module": "esnext",
			"moduleResolution": "bundler", "skipLibCheck": true, "types": []string{}, "noUnusedLocals": false},
		"files": names,
	})
	if err := os.WriteFile(filepath.Join(work, "tsconfig.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(dir, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json", "--pretty", "false")
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	diags := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, ".ts("); i > 0 {
			diags[line[:i]+".json"] = append(diags[line[:i]+".json"], line)
		} else if strings.TrimSpace(line) != "" {
			diags[""] = append(diags[""], line)
		}
	}
	if err != nil && len(diags) == 0 {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
	return diags
}

// tsSource is the TypeScript that type-checks one dashboard: the whole
// model against Dashboard, then each panel's options and field config
// against its plugin's Options and FieldConfig.
func tsSource(name string, js []byte, types map[string]string) (string, error) {
	var d struct {
		Panels []struct {
			Type        string          `json:"type"`
			Options     json.RawMessage `json:"options"`
			FieldConfig struct {
				Defaults struct {
					Custom json.RawMessage `json:"custom"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(js, &d); err != nil {
		return "", err
	}
	// Grafana's generated type for an annotation's target lists only the
	// keys every data source shares (refId, datasource, queryType…), while
	// Grafana keeps each data source's own: the ClickHouse query's keys
	// are checked by checkStructure instead, and left out here.
	var whole map[string]any
	if err := json.Unmarshal(js, &whole); err != nil {
		return "", err
	}
	if ann, ok := whole["annotations"].(map[string]any); ok {
		list, _ := ann["list"].([]any)
		for _, a := range list {
			if tg, ok := a.(map[string]any)["target"].(map[string]any); ok {
				for _, k := range [...]string{"editorType", "format", "rawSql"} {
					delete(tg, k)
				}
			}
		}
	}
	js, _ = json.Marshal(whole)
	var b strings.Builder
	b.WriteString(`import type { Dashboard } from '@grafana/schema';
// Grafana's string enums, as the string values a JSON model holds.
type Lit<T> = T extends string ? (string extends T ? string : ` + "`${T}`" + `)
	: T extends ReadonlyArray<infer U> ? Array<Lit<U>>
	: T extends object ? { [K in keyof T]: Lit<T[K]> }
	: T;
`)
	imported := map[string]bool{}
	for _, p := range d.Panels {
		mod, ok := types[p.Type]
		if !ok || mod == "" || imported[p.Type] {
			continue
		}
		imported[p.Type] = true
		fmt.Fprintf(&b, "import type * as P_%s from '%s';\n", p.Type, mod)
	}
	fmt.Fprintf(&b, "export const dashboard: Lit<Dashboard> = %s;\n", js)
	for i, p := range d.Panels {
		if !imported[p.Type] {
			continue
		}
		if len(p.Options) > 0 {
			fmt.Fprintf(&b, "export const options%d: Lit<P_%s.Options> = %s;\n", i, p.Type, p.Options)
		}
		if len(p.FieldConfig.Defaults.Custom) > 0 {
			fmt.Fprintf(&b, "export const custom%d: Lit<P_%s.FieldConfig> = %s;\n", i, p.Type, p.FieldConfig.Defaults.Custom)
		}
	}
	return b.String(), nil
}

// checkStructure is what Grafana's types leave open: the panel type is a
// core plugin, every query names the ClickHouse data source through the
// dashboard's datasource variable, every panel id is unique.
func checkStructure(js []byte, types map[string]string) []string {
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int               `json:"id"`
			Type       string            `json:"type"`
			Title      string            `json:"title"`
			Datasource map[string]string `json:"datasource"`
			Targets    []map[string]any  `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(js, &d); err != nil {
		return []string{err.Error()}
	}
	var errs []string
	if d.UID == "" {
		errs = append(errs, "no uid")
	}
	dsVar := ""
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Query == DatasourceType {
			dsVar = "${" + v.Name + "}"
		}
	}
	if dsVar == "" {
		errs = append(errs, "no datasource variable of type "+DatasourceType)
	}
	okDS := func(ds map[string]string) bool {
		return ds["type"] == DatasourceType && ds["uid"] != "" && (ds["uid"] == dsVar || ds["uid"] == DatasourceUID)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if _, ok := types[p.Type]; !ok {
			errs = append(errs, where+": unknown panel type "+p.Type)
		}
		if ids[p.ID] || p.ID <= 0 {
			errs = append(errs, where+": duplicate or missing id")
		}
		ids[p.ID] = true
		if p.Type == "row" || p.Type == "text" {
			continue
		}
		if !okDS(p.Datasource) {
			errs = append(errs, fmt.Sprintf("%s: datasource %v: want type %s, uid %s", where, p.Datasource, DatasourceType, dsVar))
		}
		if len(p.Targets) == 0 {
			errs = append(errs, where+": no query")
		}
		for _, tg := range p.Targets {
			ds, _ := tg["datasource"].(map[string]any)
			sds := map[string]string{}
			for k, v := range ds {
				sds[k], _ = v.(string)
			}
			if !okDS(sds) {
				errs = append(errs, fmt.Sprintf("%s: target datasource %v", where, ds))
			}
			if tg["editorType"] != "sql" || tg["rawSql"] == "" || tg["refId"] == "" {
				errs = append(errs, where+": a target needs editorType sql, rawSql and refId")
			}
		}
	}
	return errs
}

func TestDashboardsMatchGrafanaSchema(t *testing.T) {
	dir := schemaDir(t)
	types := panelTypes(t, dir)
	files := map[string][]byte{}
	for _, b := range Boards() {
		js, err := b.JSON()
		if err != nil {
			t.Fatal(err)
		}
		files[b.File+".json"] = js
		for _, e := range checkStructure(js, types) {
			t.Errorf("%s: %s", b.File, e)
		}
	}
	// The checker itself must catch what it is for: each of these breaks
	// the fleet overview in one way.
	good := files["fleet-overview.json"]
	bad := map[string]func(m map[string]any){
		"bad-unknown-key": func(m map[string]any) { m["panelz"] = []any{} },
		"bad-enum": func(m map[string]any) {
			panel(m, "timeseries")["options"].(map[string]any)["legend"].(map[string]any)["displayMode"] = "sideways"
		},
		"bad-option-key": func(m map[string]any) {
			panel(m, "heatmap")["options"].(map[string]any)["colour"] = map[string]any{}
		},
		"bad-type": func(m map[string]any) { m["graphTooltip"] = "shared" },
	}
	for name, breakIt := range bad {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		breakIt(m)
		js, _ := json.Marshal(m)
		files[name+".json"] = js
	}
	diags := tsProgram(t, dir, types, files)
	for name, lines := range diags {
		if !strings.HasPrefix(name, "bad-") {
			t.Errorf("%s does not match Grafana's schema:\n%s", name, strings.Join(lines, "\n"))
		}
	}
	for name := range bad {
		if len(diags[name+".json"]) == 0 {
			t.Errorf("the schema check accepted %s, which it should reject", name)
		}
	}
	// And the structure check: an unknown panel type, a panel without the
	// data source.
	var m map[string]any
	json.Unmarshal(good, &m)
	panel(m, "timeseries")["type"] = "graph-ng"
	panel(m, "heatmap")["datasource"] = map[string]any{"type": DatasourceType}
	js, _ := json.Marshal(m)
	errs := strings.Join(checkStructure(js, types), "\n")
	if !strings.Contains(errs, "unknown panel type graph-ng") || !strings.Contains(errs, "datasource map[type:"+DatasourceType+"]") {
		t.Errorf("structure check missed an unknown panel type or a missing datasource uid; it said:\n%s", errs)
	}
}

// panel returns the first panel of the type in a decoded dashboard.
func panel(m map[string]any, typ string) map[string]any {
	for _, p := range m["panels"].([]any) {
		if pm := p.(map[string]any); pm["type"] == typ {
			return pm
		}
	}
	panic("no " + typ + " panel")
}
