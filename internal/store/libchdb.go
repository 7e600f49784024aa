package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrLibraryNotFound is returned by Open for a chdb:// DSN when libchdb.so
// cannot be loaded. Binaries that only use the server backend never load it.
var ErrLibraryNotFound = errors.New("libchdb.so not found")

// libchdb holds the C entry points of the ClickHouse engine library, bound at
// run time with dlopen so that no binary links against it.
//
// Handles are opaque pointers kept as uintptr; the library owns the memory
// behind them until the matching destroy call.
type libchdb struct {
	path    string
	version func() string

	connect   func(argc int32, argv unsafe.Pointer) unsafe.Pointer
	closeConn func(connp unsafe.Pointer)

	queryN        func(conn uintptr, q unsafe.Pointer, qlen uintptr, f string, flen uintptr) uintptr
	streamQueryN  func(conn uintptr, q unsafe.Pointer, qlen uintptr, f string, flen uintptr) uintptr
	streamFetch   func(conn uintptr, res uintptr) uintptr
	streamCancel  func(conn uintptr, res uintptr)
	resultBuffer  func(res uintptr) unsafe.Pointer
	resultLength  func(res uintptr) uintptr
	resultError   func(res uintptr) unsafe.Pointer
	destroyResult func(res uintptr)

	insertN       func(conn uintptr, q unsafe.Pointer, qlen uintptr, f string, flen uintptr) uintptr
	insertAppend  func(stream uintptr, data unsafe.Pointer, n uintptr) int32
	insertDone    func(stream uintptr) uintptr
	insertCancel  func(stream uintptr)
	insertError   func(stream uintptr) unsafe.Pointer
	insertDestroy func(stream uintptr)

	// The _with_params_n variants bind {name:Type} placeholders, which
	// the engine parses as it would a ClickHouse server's param_name.
	queryParamsN       func(conn uintptr, q unsafe.Pointer, qlen uintptr, f string, flen uintptr, names, nameLens, values, valueLens unsafe.Pointer, n uintptr) uintptr
	streamQueryParamsN func(conn uintptr, q unsafe.Pointer, qlen uintptr, f string, flen uintptr, names, nameLens, values, valueLens unsafe.Pointer, n uintptr) uintptr
	insertParamsN      func(conn uintptr, q unsafe.Pointer, qlen uintptr, f string, flen uintptr, names, nameLens, values, valueLens unsafe.Pointer, n uintptr) uintptr
}

var (
	libOnce sync.Once
	libVal  *libchdb
	libErr  error
)

// LibraryCandidates lists where the embedded backend looks for libchdb.so, in
// order: $SPIKEHUNT_LIBCHDB alone when it is set; else beside the running
// binary and in ../lib/spikehunt from it (the layout `make install` writes:
// PREFIX/bin/spikehunt, PREFIX/lib/spikehunt/libchdb.so), both for the
// binary's path and, when it is a symbolic link, for its target; then the
// repository's dependency cache (make deps) in the working directory or
// above it; then the system library folders.
func LibraryCandidates() []string {
	// An explicit path is the only candidate: a typo must not silently load
	// some other copy.
	if p := os.Getenv("SPIKEHUNT_LIBCHDB"); p != "" {
		return []string{p}
	}
	var c []string
	add := func(p string) {
		if !slices.Contains(c, p) {
			c = append(c, p)
		}
	}
	if exe, err := os.Executable(); err == nil {
		dirs := []string{filepath.Dir(exe)}
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
		for _, d := range dirs {
			add(filepath.Join(d, "libchdb.so"))
			add(filepath.Join(d, "..", "lib", "spikehunt", "libchdb.so"))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		// Walk up to the module root: tests run inside package folders.
		for d := wd; ; d = filepath.Dir(d) {
			if m, _ := filepath.Glob(filepath.Join(d, ".cache/deps/chdb/*/libchdb.so")); len(m) > 0 {
				add(m[len(m)-1])
				break
			}
			if filepath.Dir(d) == d {
				add(filepath.Join(wd, ".cache/deps/chdb/*/libchdb.so") + " and the same in every folder above")
				break
			}
		}
	}
	add("/usr/local/lib/libchdb.so")
	add("/usr/lib/libchdb.so")
	return c
}

// loadLibchdb loads the library once per process; the engine cannot be
// unloaded, so neither can the library.
func loadLibchdb() (*libchdb, error) {
	libOnce.Do(func() {
		var tried []string
		for _, p := range LibraryCandidates() {
			if _, err := os.Stat(p); err != nil {
				tried = append(tried, p)
				continue
			}
			libVal, libErr = bindLibchdb(p)
			return
		}
		libErr = fmt.Errorf("%w (looked in %s): install it beside the binary with `make install PREFIX=…` (PREFIX/lib/spikehunt/libchdb.so), "+
			"run `make deps` in the checkout, or set SPIKEHUNT_LIBCHDB=/path/to/libchdb.so",
			ErrLibraryNotFound, strings.Join(tried, ", "))
	})
	return libVal, libErr
}

func bindLibchdb(path string) (l *libchdb, err error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	// RegisterLibFunc panics on a missing symbol: an older library.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s lacks a required symbol (%v): install the version pinned in deps/versions.env with `make deps`", path, r)
		}
	}()
	l = &libchdb{path: path}
	reg := func(fp any, name string) { purego.RegisterLibFunc(fp, h, name) }
	reg(&l.version, "chdb_version")
	reg(&l.connect, "chdb_connect")
	reg(&l.closeConn, "chdb_close_conn")
	reg(&l.queryN, "chdb_query_n")
	reg(&l.streamQueryN, "chdb_stream_query_n")
	reg(&l.streamFetch, "chdb_stream_fetch_result")
	reg(&l.streamCancel, "chdb_stream_cancel_query")
	reg(&l.resultBuffer, "chdb_result_buffer")
	reg(&l.resultLength, "chdb_result_length")
	reg(&l.resultError, "chdb_result_error")
	reg(&l.destroyResult, "chdb_destroy_query_result")
	reg(&l.insertN, "chdb_stream_insert_n")
	reg(&l.queryParamsN, "chdb_query_with_params_n")
	reg(&l.streamQueryParamsN, "chdb_stream_query_with_params_n")
	reg(&l.insertParamsN, "chdb_stream_insert_with_params_n")
	reg(&l.insertAppend, "chdb_stream_append")
	reg(&l.insertDone, "chdb_stream_done")
	reg(&l.insertCancel, "chdb_stream_cancel_insert")
	reg(&l.insertError, "chdb_stream_insert_error")
	reg(&l.insertDestroy, "chdb_destroy_insert_stream")
	return l, nil
}

// cString copies a NUL-terminated C string; nil gives "".
func cString(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

// resultBytes returns a view of the result's buffer. The view is valid only
// until destroyResult(res): copy what must outlive it.
func (l *libchdb) resultBytes(res uintptr) []byte {
	n := l.resultLength(res)
	p := l.resultBuffer(res)
	if n == 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(n))
}

func (l *libchdb) resultErr(res uintptr) error {
	if res == 0 {
		return errors.New("chdb returned no result")
	}
	if msg := cString(l.resultError(res)); msg != "" {
		return parseException(msg)
	}
	return nil
}

// bytesPtr gives the address of b's first byte for a C call; the caller keeps
// b alive across the call.
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// QueryParam is a value for a {Name:Type} placeholder of a statement, in
// the text form a ClickHouse server takes as the URL parameter
// param_Name: the type's escaped text (TabSeparated) form, parsed by the
// engine as that type, never spliced into the statement.
type QueryParam struct {
	Name, Value string
}

// paramArrays lays params out as the engine's _with_params_n entry points
// take them: four C arrays (name pointers, name lengths, value pointers,
// value lengths) over one pinned buffer. The caller calls unpin after the
// call; the engine copies what it keeps.
type paramArrays struct {
	names, nameLens, values, valueLens unsafe.Pointer
	n                                  uintptr
	pin                                runtime.Pinner
}

func packParams(params []QueryParam) *paramArrays {
	a := &paramArrays{n: uintptr(len(params))}
	if len(params) == 0 {
		return a
	}
	size := 1 // never empty, so that every pointer below is into it
	for _, p := range params {
		size += len(p.Name) + len(p.Value)
	}
	buf := make([]byte, 0, size)
	names := make([]uintptr, len(params))
	values := make([]uintptr, len(params))
	nameLens := make([]uintptr, len(params))
	valueLens := make([]uintptr, len(params))
	base := unsafe.Pointer(unsafe.SliceData(buf[:1]))
	for i, p := range params {
		names[i], nameLens[i] = uintptr(base)+uintptr(len(buf)), uintptr(len(p.Name))
		buf = append(buf, p.Name...)
		values[i], valueLens[i] = uintptr(base)+uintptr(len(buf)), uintptr(len(p.Value))
		buf = append(buf, p.Value...)
	}
	a.pin.Pin(&buf[:1][0])
	a.pin.Pin(&names[0])
	a.pin.Pin(&values[0])
	a.pin.Pin(&nameLens[0])
	a.pin.Pin(&valueLens[0])
	a.names, a.values = unsafe.Pointer(&names[0]), unsafe.Pointer(&values[0])
	a.nameLens, a.valueLens = unsafe.Pointer(&nameLens[0]), unsafe.Pointer(&valueLens[0])
	return a
}

// unpin releases the arrays once the engine has returned.
func (a *paramArrays) unpin() { a.pin.Unpin() }

// query, streamQuery and insert run q through the plain entry point, or
// through its _with_params_n variant when there are params. q must stay
// alive across the call (the caller's runtime.KeepAlive).
func (l *libchdb) query(conn uintptr, q []byte, format string, params []QueryParam) uintptr {
	if len(params) == 0 {
		return l.queryN(conn, bytesPtr(q), uintptr(len(q)), format, uintptr(len(format)))
	}
	a := packParams(params)
	defer a.unpin()
	return l.queryParamsN(conn, bytesPtr(q), uintptr(len(q)), format, uintptr(len(format)), a.names, a.nameLens, a.values, a.valueLens, a.n)
}

func (l *libchdb) streamQuery(conn uintptr, q []byte, format string, params []QueryParam) uintptr {
	if len(params) == 0 {
		return l.streamQueryN(conn, bytesPtr(q), uintptr(len(q)), format, uintptr(len(format)))
	}
	a := packParams(params)
	defer a.unpin()
	return l.streamQueryParamsN(conn, bytesPtr(q), uintptr(len(q)), format, uintptr(len(format)), a.names, a.nameLens, a.values, a.valueLens, a.n)
}

func (l *libchdb) insert(conn uintptr, q []byte, format string, params []QueryParam) uintptr {
	if len(params) == 0 {
		return l.insertN(conn, bytesPtr(q), uintptr(len(q)), format, uintptr(len(format)))
	}
	a := packParams(params)
	defer a.unpin()
	return l.insertParamsN(conn, bytesPtr(q), uintptr(len(q)), format, uintptr(len(format)), a.names, a.nameLens, a.values, a.valueLens, a.n)
}
