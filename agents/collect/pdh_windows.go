//go:build windows

package collect

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Per-processor interrupt and DPC time and counts on Windows, through the
// Performance Data Helper (pdh.dll; golang.org/x/sys/windows has no PDH
// wrappers). The "Processor Information" object exists since Windows 7 /
// Server 2008 R2. Counter paths are added with PdhAddEnglishCounterW so
// that they work whatever the system's display language.

func init() { registerSampler("pdh", fastCadence, newPDHSampler) }

var (
	pdhDLL                      = windows.NewLazySystemDLL("pdh.dll")
	pdhOpenQuery                = pdhDLL.NewProc("PdhOpenQueryW")
	pdhAddEnglishCounter        = pdhDLL.NewProc("PdhAddEnglishCounterW")
	pdhCollectQueryData         = pdhDLL.NewProc("PdhCollectQueryData")
	pdhGetFormattedCounterArray = pdhDLL.NewProc("PdhGetFormattedCounterArrayW")
	pdhCloseQuery               = pdhDLL.NewProc("PdhCloseQuery")
)

const (
	pdhFmtDouble     = 0x00000200
	pdhFmtNoCap100   = 0x00008000
	pdhMoreData      = 0x800007D2
	pdhCStatusValid  = 0 // PDH_CSTATUS_VALID_DATA
	pdhCStatusNew    = 1 // PDH_CSTATUS_NEW_DATA
	pdhMaxCPUGroups  = 64
	pdhCounterPrefix = `\Processor Information(*)\`
)

var pdhCounterNames = [4]string{"% DPC Time", "% Interrupt Time", "DPCs Queued/sec", "Interrupts/sec"}

// pdhItem is PDH_FMT_COUNTERVALUE_ITEM_W read as a double: the name
// pointer, then PDH_FMT_COUNTERVALUE (CStatus, padding, the union). The
// padding keeps the value at offset 16 on 32-bit Windows as well.
type pdhItem struct {
	name    *uint16
	_       [8 - unsafe.Sizeof(uintptr(0))]byte
	cStatus uint32
	_       uint32
	value   float64
}

type pdhSampler struct {
	env      *env
	query    uintptr
	counters [4]uintptr
	items    []pdhItem
	base     []int
	readings
	resetTally
}

func newPDHSampler(e *env) (sampler, error) {
	if err := pdhOpenQuery.Find(); err != nil {
		return nil, fmt.Errorf("pdh.dll: %w (%w)", ErrNotSupported, err)
	}
	s := &pdhSampler{env: e, base: processorGroupBases()}
	if rc, _, _ := pdhOpenQuery.Call(0, 0, uintptr(unsafe.Pointer(&s.query))); rc != 0 {
		return nil, fmt.Errorf("PdhOpenQueryW: status 0x%08x", uint32(rc))
	}
	for i, name := range pdhCounterNames {
		path, err := windows.UTF16PtrFromString(pdhCounterPrefix + name)
		if err != nil {
			s.Close()
			return nil, err
		}
		if rc, _, _ := pdhAddEnglishCounter.Call(s.query, uintptr(unsafe.Pointer(path)), 0, uintptr(unsafe.Pointer(&s.counters[i]))); rc != 0 {
			s.Close()
			return nil, fmt.Errorf("PdhAddEnglishCounterW %q: status 0x%08x", name, uint32(rc))
		}
	}
	return s, nil
}

// processorGroupBases returns, per processor group, the number of active
// logical processors in the groups before it.
func processorGroupBases() []int {
	var bases []int
	total := 0
	for g := uint16(0); g < pdhMaxCPUGroups; g++ {
		n := int(windows.GetActiveProcessorCount(g))
		if n == 0 {
			break
		}
		bases = append(bases, total)
		total += n
	}
	return bases
}

// Close closes the PDH query.
func (s *pdhSampler) Close() error {
	if s.query != 0 {
		pdhCloseQuery.Call(s.query)
		s.query = 0
	}
	return nil
}

func (s *pdhSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	if rc, _, _ := pdhCollectQueryData.Call(s.query); rc != 0 {
		return dst, fmt.Errorf("PdhCollectQueryData: status 0x%08x", uint32(rc))
	}
	now := s.env.tl.now()
	start, end, ok := s.advance(s.env.tl, now)
	if !ok {
		return dst, nil // PDH rates need two collections: this one is the baseline
	}
	var r pdhReading
	maps := []*map[string]float64{&r.dpcTimePct, &r.interruptTimePct, &r.dpcsQueued, &r.interrupts}
	for i, c := range s.counters {
		m, err := s.formatted(c)
		if err != nil {
			return dst, fmt.Errorf("%s: %w", pdhCounterNames[i], err)
		}
		*maps[i] = m
	}
	pts, _ := convertPDH(r, start, end, s.base)
	return append(dst, pts...), nil
}

// formatted reads one counter's value for every instance.
func (s *pdhSampler) formatted(counter uintptr) (map[string]float64, error) {
	for range 3 { // the instance list can grow between the sizing call and the read
		var size, count uint32
		var first *pdhItem
		if len(s.items) > 0 {
			first = &s.items[0]
		}
		size = uint32(len(s.items)) * uint32(unsafe.Sizeof(pdhItem{}))
		rc, _, _ := pdhGetFormattedCounterArray.Call(counter, pdhFmtDouble|pdhFmtNoCap100,
			uintptr(unsafe.Pointer(&size)), uintptr(unsafe.Pointer(&count)), uintptr(unsafe.Pointer(first)))
		switch uint32(rc) {
		case 0:
			out := make(map[string]float64, count)
			for _, it := range s.items[:count] {
				if it.cStatus == pdhCStatusValid || it.cStatus == pdhCStatusNew {
					out[windows.UTF16PtrToString(it.name)] = it.value
				}
			}
			return out, nil
		case pdhMoreData:
			// size is in bytes and includes the names stored after the items.
			n := (int(size) + int(unsafe.Sizeof(pdhItem{})) - 1) / int(unsafe.Sizeof(pdhItem{}))
			s.items = make([]pdhItem, n+1)
		default:
			return nil, fmt.Errorf("PdhGetFormattedCounterArrayW: status 0x%08x", uint32(rc))
		}
	}
	return nil, fmt.Errorf("PdhGetFormattedCounterArrayW: instance list kept growing")
}
