package explain

import (
	"bytes"
	"compress/gzip"

	"google.golang.org/protobuf/encoding/protowire"
)

// Profile returns the on-CPU samples taken in [from, to) (all of them when
// to is 0) as a gzipped pprof profile (profile.proto): two sample types,
// samples/count and cpu/nanoseconds (periodNS a sample), each sample's
// call chain with its task as the outermost frame. go tool pprof,
// Pyroscope, Parca and speedscope open it.
func (tr *Trace) Profile(from, to, periodNS int64) []byte {
	p := pprofWriter{strings: map[string]int64{"": 0}, funcs: map[string]uint64{}, table: []string{""}}
	type key struct {
		stack int32
		task  string
	}
	counts := map[key]int64{}
	var order []key
	var first, last int64
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.Kind != KindSample || e.T < from || (to != 0 && e.T >= to) {
			continue
		}
		if first == 0 || e.T < first {
			first = e.T
		}
		last = max(last, e.T)
		k := key{e.Stack, e.Task.Comm}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	var body []byte
	for _, t := range [][2]string{{"samples", "count"}, {"cpu", "nanoseconds"}} {
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendBytes(body, p.valueType(t[0], t[1]))
	}
	for _, k := range order {
		var locs []byte
		if k.stack >= 0 {
			for _, f := range tr.Stacks[k.stack] {
				locs = protowire.AppendVarint(locs, p.location(f))
			}
		}
		locs = protowire.AppendVarint(locs, p.location(k.task))
		var vals []byte
		vals = protowire.AppendVarint(vals, uint64(counts[k]))
		vals = protowire.AppendVarint(vals, uint64(counts[k]*periodNS))
		var s []byte
		s = protowire.AppendTag(s, 1, protowire.BytesType)
		s = protowire.AppendBytes(s, locs)
		s = protowire.AppendTag(s, 2, protowire.BytesType)
		s = protowire.AppendBytes(s, vals)
		body = protowire.AppendTag(body, 2, protowire.BytesType)
		body = protowire.AppendBytes(body, s)
	}
	body = append(body, p.locations...)
	body = append(body, p.functions...)
	for _, s := range p.table {
		body = protowire.AppendTag(body, 6, protowire.BytesType)
		body = protowire.AppendString(body, s)
	}
	if last > first {
		body = protowire.AppendTag(body, 10, protowire.VarintType)
		body = protowire.AppendVarint(body, uint64(last-first))
	}
	body = protowire.AppendTag(body, 11, protowire.BytesType)
	body = protowire.AppendBytes(body, p.valueType("cpu", "nanoseconds"))
	body = protowire.AppendTag(body, 12, protowire.VarintType)
	body = protowire.AppendVarint(body, uint64(periodNS))
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(body)
	zw.Close()
	return out.Bytes()
}

// pprofWriter builds the string table, functions and locations: one
// function and one location per distinct frame name (perf script gives
// names, and a flame graph or a top list needs no more).
type pprofWriter struct {
	strings              map[string]int64
	table                []string
	funcs                map[string]uint64
	functions, locations []byte
}

func (p *pprofWriter) str(s string) int64 {
	if i, ok := p.strings[s]; ok {
		return i
	}
	i := int64(len(p.table))
	p.strings[s] = i
	p.table = append(p.table, s)
	return i
}

func (p *pprofWriter) valueType(typ, unit string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(p.str(typ)))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(p.str(unit)))
}

// location returns the id of name's location (and function), adding them
// the first time.
func (p *pprofWriter) location(name string) uint64 {
	if id, ok := p.funcs[name]; ok {
		return id
	}
	id := uint64(len(p.funcs) + 1)
	p.funcs[name] = id
	var fn []byte
	fn = protowire.AppendTag(fn, 1, protowire.VarintType)
	fn = protowire.AppendVarint(fn, id)
	fn = protowire.AppendTag(fn, 2, protowire.VarintType)
	fn = protowire.AppendVarint(fn, uint64(p.str(name)))
	p.functions = protowire.AppendTag(p.functions, 5, protowire.BytesType)
	p.functions = protowire.AppendBytes(p.functions, fn)
	var line []byte
	line = protowire.AppendTag(line, 1, protowire.VarintType)
	line = protowire.AppendVarint(line, id)
	var loc []byte
	loc = protowire.AppendTag(loc, 1, protowire.VarintType)
	loc = protowire.AppendVarint(loc, id)
	loc = protowire.AppendTag(loc, 4, protowire.BytesType)
	loc = protowire.AppendBytes(loc, line)
	p.locations = protowire.AppendTag(p.locations, 4, protowire.BytesType)
	p.locations = protowire.AppendBytes(p.locations, loc)
	return id
}
