package alerts

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// jsonSchema validates a document against the subset of JSON Schema 2020-12
// that alert.schema.json uses: type, const, enum, properties, required,
// additionalProperties (as a schema), items, minItems, minLength, minimum,
// maximum, pattern, format date-time, $ref to #/$defs/…, allOf, oneOf, not.
// Strict mode also rejects object properties the schema does not declare,
// so that a field added to the Go types without the schema fails the tests
// (readers must still ignore unknown fields: the schema allows them).
type jsonSchema struct {
	root   map[string]any
	strict bool
}

func loadSchema(t *testing.T, strict bool) jsonSchema {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(alertdoc.JSONSchema, &root); err != nil {
		t.Fatalf("alert.schema.json: %v", err)
	}
	return jsonSchema{root: root, strict: strict}
}

// validate returns every violation, as "path: what".
func (s jsonSchema) validate(doc []byte) []string {
	var v any
	d := json.NewDecoder(strings.NewReader(string(doc)))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	var errs []string
	s.check(s.root, v, "$", &errs, s.strict)
	return errs
}

func (s jsonSchema) resolve(sch map[string]any) map[string]any {
	for {
		ref, ok := sch["$ref"].(string)
		if !ok {
			return sch
		}
		name, found := strings.CutPrefix(ref, "#/$defs/")
		if !found {
			panic("unsupported $ref " + ref)
		}
		sch = s.root["$defs"].(map[string]any)[name].(map[string]any)
	}
}

var supportedKeywords = map[string]bool{
	"$schema": true, "$id": true, "$ref": true, "$defs": true, "title": true, "description": true,
	"type": true, "const": true, "enum": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "minItems": true, "minLength": true, "minimum": true, "maximum": true, "pattern": true,
	"format": true, "allOf": true, "oneOf": true, "not": true,
}

// check validates v against sch. strict rejects undeclared properties of
// this object; it is off inside allOf, oneOf and not, whose members each
// see only part of the object, and on again for nested values.
func (s jsonSchema) check(sch map[string]any, v any, path string, errs *[]string, strict bool) {
	sch = s.resolve(sch)
	fail := func(format string, a ...any) { *errs = append(*errs, path+": "+fmt.Sprintf(format, a...)) }
	for k := range sch {
		if !supportedKeywords[k] {
			panic("the test validator does not know keyword " + k + ": teach it, or do not use it")
		}
	}
	if c, ok := sch["const"]; ok && !jsonEqual(c, v) {
		fail("want %v, got %v", c, v)
	}
	if e, ok := sch["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || jsonEqual(x, v)
		}
		if !found {
			fail("%v is not one of %v", v, e)
		}
	}
	if typ, ok := sch["type"].(string); ok && !hasType(v, typ) {
		fail("want %s, got %T", typ, v)
		return
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := sch["properties"].(map[string]any)
		for _, r := range asList(sch["required"]) {
			if _, ok := x[r.(string)]; !ok {
				fail("missing required %q", r)
			}
		}
		extra, _ := sch["additionalProperties"].(map[string]any)
		declared := s.declared(sch)
		for _, k := range sortedKeys(x) {
			if p, ok := props[k].(map[string]any); ok {
				s.check(p, x[k], path+"."+k, errs, s.strict)
			} else if extra != nil {
				s.check(extra, x[k], path+"."+k, errs, s.strict)
			} else if strict && declared != nil && !declared[k] {
				fail("property %q is not in the schema", k)
			}
		}
	case []any:
		if m, ok := sch["minItems"].(float64); ok && float64(len(x)) < m {
			fail("%d items, want at least %v", len(x), m)
		}
		if it, ok := sch["items"].(map[string]any); ok {
			for i, e := range x {
				s.check(it, e, fmt.Sprintf("%s[%d]", path, i), errs, s.strict)
			}
		}
	case string:
		if m, ok := sch["minLength"].(float64); ok && float64(len([]rune(x))) < m {
			fail("%q is shorter than %v", x, m)
		}
		if p, ok := sch["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
			fail("%q does not match %s", x, p)
		}
		if sch["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, x); err != nil {
				fail("%q is not an RFC 3339 date-time", x)
			}
		}
	case json.Number:
		f, _ := x.Float64()
		if m, ok := sch["minimum"].(float64); ok && f < m {
			fail("%v < minimum %v", f, m)
		}
		if m, ok := sch["maximum"].(float64); ok && f > m {
			fail("%v > maximum %v", f, m)
		}
	}
	for _, sub := range asList(sch["allOf"]) {
		s.check(sub.(map[string]any), v, path, errs, false)
	}
	if one := asList(sch["oneOf"]); len(one) > 0 {
		matched := 0
		for _, sub := range one {
			var e []string
			s.check(sub.(map[string]any), v, path, &e, false)
			if len(e) == 0 {
				matched++
			}
		}
		if matched != 1 {
			fail("matches %d of the oneOf alternatives, want exactly 1", matched)
		}
	}
	if not, ok := sch["not"].(map[string]any); ok {
		var e []string
		s.check(not, v, path, &e, false)
		if len(e) == 0 {
			fail("matches a schema it must not match")
		}
	}
}

// declared is the set of properties an object schema and its allOf members
// declare; nil when it declares none (a map such as hw_classes).
func (s jsonSchema) declared(sch map[string]any) map[string]bool {
	props, ok := sch["properties"].(map[string]any)
	if !ok {
		return nil
	}
	out := map[string]bool{}
	for k := range props {
		out[k] = true
	}
	for _, sub := range asList(sch["allOf"]) {
		for k := range s.declared(s.resolve(sub.(map[string]any))) {
			out[k] = true
		}
	}
	return out
}

func hasType(v any, typ string) bool {
	switch typ {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		f, err := n.Float64()
		return err == nil && f == math.Trunc(f)
	case "boolean":
		_, ok := v.(bool)
		return ok
	}
	panic("unsupported type " + typ)
}

func jsonEqual(schemaValue, docValue any) bool {
	if n, ok := docValue.(json.Number); ok {
		f, _ := n.Float64()
		return schemaValue == f
	}
	return fmt.Sprint(schemaValue) == fmt.Sprint(docValue)
}

func asList(v any) []any { l, _ := v.([]any); return l }

func sortedKeys(m map[string]any) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// requireValid fails t unless every alert is valid against the schema, in
// strict mode.
func requireValid(t *testing.T, alerts ...alertdoc.Alert) {
	t.Helper()
	s := loadSchema(t, true)
	for _, a := range alerts {
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if errs := s.validate(b); len(errs) > 0 {
			t.Errorf("alert %s does not match alert.schema.json:\n  %s\n%s", a.AlertID, strings.Join(errs, "\n  "), b)
		}
	}
}

func TestAlertSchemaAcceptsWhatDecideMakes(t *testing.T) {
	f := newFleet()
	st := State{}
	var all []alertdoc.Alert
	for _, step := range []struct {
		at   time.Duration
		pass Pass
	}{
		{0, Pass{NewSpikes: f.windows("billy", 0, "h1", "h2", "h3"), Patterns: []detect.Pattern{f.pattern("billy", 40)}}},
		{DefaultPatternChangeEvery, Pass{Patterns: []detect.Pattern{f.pattern("billy", 20)}}},
		{DefaultPatternChangeEvery + time.Minute, Pass{}},
	} {
		d, err := Decide(Config{}, st, step.pass, f.t0.Add(step.at))
		if err != nil {
			t.Fatal(err)
		}
		st = d.Next
		all = append(all, d.Alerts...)
	}
	kinds := map[string]bool{}
	for _, a := range all {
		kinds[a.Kind] = true
		if a.Pattern != nil {
			kinds[a.Pattern.Change] = true
		}
	}
	if len(kinds) != 5 {
		t.Fatalf("want every kind and change among the alerts, got %v", kinds)
	}
	requireValid(t, all...)
}

func TestAlertSchemaRejectsBrokenDocuments(t *testing.T) {
	f := newFleet()
	d, err := Decide(Config{}, State{}, Pass{NewSpikes: f.windows("billy", 0, "h1")}, f.t0)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(d.Alerts[0])
	s := loadSchema(t, true)
	if errs := s.validate(good); len(errs) > 0 {
		t.Fatalf("the good document fails: %v", errs)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"another schema version", `"spikehunt.alert/v1"`, `"spikehunt.alert/v2"`, "$.schema: want spikehunt.alert/v1"},
		{"a kind without its body", `"kind":"spike-group"`, `"kind":"pattern"`, "oneOf"},
		{"a time that is not RFC 3339", `"generated_at":"`, `"generated_at":"yesterday `, "not an RFC 3339 date-time"},
		{"a negative count", `"count":1`, `"count":-1`, "$.spike_group.count: -1 < minimum 1"},
		{"a field the schema does not declare", `"count":1`, `"count":1,"colour":"red"`, `property "colour" is not in the schema`},
		{"a missing field", `"peak_host":"h1",`, ``, `missing required "peak_host"`},
	} {
		doc := strings.Replace(string(good), tc.from, tc.to, 1)
		if doc == string(good) {
			t.Fatalf("%s: %q is not in the document %s", tc.name, tc.from, good)
		}
		errs := strings.Join(s.validate([]byte(doc)), "\n")
		if !strings.Contains(errs, tc.want) {
			t.Errorf("%s: want an error with %q, got:\n%s", tc.name, tc.want, errs)
		}
	}
	if _, err := alertdoc.Parse([]byte(strings.Replace(string(good), "alert/v1", "alert/v2", 1))); err == nil || !strings.Contains(err.Error(), "unknown alert schema") {
		t.Errorf("Parse of a v2 document: %v", err)
	}
	if a, err := alertdoc.Parse(good); err != nil || a.AlertID != d.Alerts[0].AlertID {
		t.Errorf("Parse of the good document: %v", err)
	}
}

// The examples in schema.md are valid documents, and their ids are the ones
// the code computes for the same content: the doc cannot drift from either.
func TestAlertSchemaDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../../internal/alertdoc/schema.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) != 2 {
		t.Fatalf("schema.md has %d json examples, want 2", len(blocks))
	}
	s := loadSchema(t, true)
	for i, b := range blocks {
		if errs := s.validate(b[1]); len(errs) > 0 {
			t.Errorf("example %d: %v", i+1, errs)
		}
		a, err := alertdoc.Parse(b[1])
		if err != nil {
			t.Fatalf("example %d: %v", i+1, err)
		}
		var id string
		if a.SpikeGroup != nil {
			id = alertdoc.SpikeGroupID(a.Service, a.SpikeGroup.SpikeIDs)
		} else {
			id = alertdoc.PatternAlertID(a.Service, a.Pattern.Change, a.Pattern.PatternFacts)
		}
		if id != a.AlertID {
			t.Errorf("example %d: alert_id %s, the code computes %s", i+1, a.AlertID, id)
		}
	}
}
