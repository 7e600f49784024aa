package chhttp

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"sort"
	"strings"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Query parameters: a statement's {name:Type} placeholders take their
// values from param_name URL parameters, or from multipart/form-data
// fields of the same names (clickhouse-connect sends long queries and
// their parameters so). The engine binds them (store.QueryParam): a value
// is parsed as its placeholder's type, never spliced into the text, and a
// value the type cannot parse is the engine's BAD_QUERY_PARAMETER.

// urlParams returns the param_ URL parameters, sorted by name (the last
// value of a repeated one wins, as for settings).
func urlParams(p url.Values) ([]store.QueryParam, error) {
	var out []store.QueryParam
	for k, vs := range p {
		name, ok := strings.CutPrefix(k, "param_")
		if !ok || len(vs) == 0 {
			continue
		}
		if err := checkParamName(name); err != nil {
			return nil, err
		}
		out = append(out, store.QueryParam{Name: name, Value: vs[len(vs)-1]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func checkParamName(name string) error {
	if name == "" {
		return exception(456, "a query parameter has an empty name (param_ with nothing after it)", "UNKNOWN_QUERY_PARAMETER")
	}
	for _, c := range name {
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return exception(456, fmt.Sprintf("query parameter name %q is not an identifier (letters, digits, _)", name), "UNKNOWN_QUERY_PARAMETER")
		}
	}
	return nil
}

// form is what a multipart/form-data body carries: query text and
// parameters.
type form struct {
	query  string
	params []store.QueryParam
}

// isMultipart reports a multipart/form-data body and its boundary.
func isMultipart(contentType string) (string, bool) {
	mt, ps, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || ps["boundary"] == "" {
		return "", false
	}
	return ps["boundary"], true
}

// readForm reads a multipart/form-data body of at most max bytes of field
// values. A field named query is query text; param_name fields are
// parameters; a part with a file name is an external table, which
// serve-clickhouse does not implement.
func readForm(body io.Reader, boundary string, max int64) (*form, error) {
	mr := multipart.NewReader(body, boundary)
	f := &form{}
	budget := max
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, exception(27, "read the multipart/form-data body: "+err.Error(), "CANNOT_PARSE_INPUT")
		}
		name := part.FormName()
		if part.FileName() != "" {
			return nil, exception(48, fmt.Sprintf("external tables (the form's file part %q) are not implemented by serve-clickhouse: insert the data into a table first, or inline it", name), "NOT_IMPLEMENTED")
		}
		v, err := io.ReadAll(io.LimitReader(part, budget+1))
		if err != nil {
			return nil, exception(27, "read the multipart/form-data body: "+err.Error(), "CANNOT_PARSE_INPUT")
		}
		budget -= int64(len(v))
		if budget < 0 {
			return nil, exception(62, fmt.Sprintf("the form's fields are longer than %d bytes", max), "SYNTAX_ERROR")
		}
		switch {
		case name == "query":
			if f.query != "" {
				f.query += "\n"
			}
			f.query += string(v)
		case strings.HasPrefix(name, "param_"):
			pname := strings.TrimPrefix(name, "param_")
			if err := checkParamName(pname); err != nil {
				return nil, err
			}
			f.params = append(f.params, store.QueryParam{Name: pname, Value: string(v)})
		default:
			return nil, exception(48, fmt.Sprintf("form field %q is not implemented by serve-clickhouse: a form carries query and param_<name> fields; send settings as URL parameters", name), "NOT_IMPLEMENTED")
		}
	}
	return f, nil
}

// mergeParams adds the form's parameters to the URL's; a name in both is
// the form's.
func mergeParams(fromURL, fromForm []store.QueryParam) []store.QueryParam {
	out := append([]store.QueryParam(nil), fromForm...)
	seen := map[string]bool{}
	for _, p := range fromForm {
		seen[p.Name] = true
	}
	for _, p := range fromURL {
		if !seen[p.Name] {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
