package wpr

// The Windows Performance Recorder's recording profile (.wprp), generated
// from a named Profile. The schema is WPRControlProfiles.xsd, shipped with
// the Windows Performance Toolkit; WPR insists on its order: collectors,
// then system providers, then event providers, then profiles.

import (
	"encoding/xml"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spikehunt/spikehunt/agents/capture"
)

// wprProfileName is the profile's name inside the .wprp, the part after
// "!" in `wpr -start file.wprp!SpikeHunt`. Every generated file holds only
// this one profile, so the name never has to say which capture it is; the
// capture id and our profile name go into its Description.
const wprProfileName = "SpikeHunt"

const (
	wprSystemCollectorID = "spikehunt.collector.system"
	wprEventCollectorID  = "spikehunt.collector.events"
	wprSystemProviderID  = "spikehunt.provider.system"
)

// wprSystemEvent is what one of our WPR event names turns on in the
// kernel's system provider: its keywords and the events whose stacks the
// kernel walks.
type wprSystemEvent struct{ keywords, stacks []string }

// wprSystemEvents are the event names a WPR profile may list, each mapped
// to WPR's SystemKeyword and Stack values. The stacks are the ones WPA's
// CPU, wait and disk views need: a sample's stack says what ran, a
// context switch's stack says why a thread waited, a ready-thread stack
// says who woke it. DPCs and ISRs have no stack event of their own; WPA
// attributes their time through the stacks of the samples that land in
// them (the DPC flood (docs/field-stories.md) "DPC/ISR Usage by Module, Stack").
var wprSystemEvents = map[string]wprSystemEvent{
	"CpuConfig":      {keywords: []string{"CpuConfig"}},
	"Loader":         {keywords: []string{"Loader"}},
	"ProcessThread":  {keywords: []string{"ProcessThread"}, stacks: []string{"ProcessCreate", "ThreadCreate"}},
	"SampledProfile": {keywords: []string{"SampledProfile"}, stacks: []string{"SampledProfile"}},
	"CSwitch":        {keywords: []string{"CSwitch"}, stacks: []string{"CSwitch"}},
	"ReadyThread":    {keywords: []string{"ReadyThread"}, stacks: []string{"ReadyThread"}},
	"DPC":            {keywords: []string{"DPC"}},
	"Interrupt":      {keywords: []string{"Interrupt"}},
	// The *Init events carry the issuing thread's stack; without
	// DiskIOInit the DiskIO completions say only which disk and how long.
	"DiskIO":     {keywords: []string{"DiskIO", "DiskIOInit"}, stacks: []string{"DiskReadInit", "DiskWriteInit", "DiskFlushInit"}},
	"HardFaults": {keywords: []string{"HardFaults"}, stacks: []string{"HardFault"}},
}

// wprProviderPrefix marks a user-mode (manifest or TraceLogging) ETW
// provider in a WPR profile's events:
//
//	provider:<name or GUID>[:0x<keyword mask>[:<level>]]
//
// e.g. "provider:Microsoft-Windows-Kernel-Power:0x4:4". Without a mask or
// level WPR applies its own defaults.
const wprProviderPrefix = "provider:"

var (
	wprProviderNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$`)
	wprKeywordMaskRE  = regexp.MustCompile(`^0x[0-9A-Fa-f]{1,16}$`)
)

type wprUserProvider struct {
	name     string
	keywords string // "" for WPR's default
	level    int    // 0 for WPR's default
}

func parseWPRProvider(ev string) (wprUserProvider, error) {
	parts := strings.Split(strings.TrimPrefix(ev, wprProviderPrefix), ":")
	bad := func(why string) error {
		return fmt.Errorf("%w: WPR provider %q: %s (provider:<name or GUID>[:0x<keyword mask>[:<level 1-255>]])", capture.ErrInvalid, ev, why)
	}
	if len(parts) > 3 {
		return wprUserProvider{}, bad("too many fields")
	}
	p := wprUserProvider{name: parts[0]}
	if !wprProviderNameRE.MatchString(p.name) {
		return wprUserProvider{}, bad("the name must be letters, digits, '.', '_' and '-'")
	}
	if len(parts) > 1 {
		if !wprKeywordMaskRE.MatchString(parts[1]) {
			return wprUserProvider{}, bad("the keyword mask must be hex with 0x, at most 64 bits")
		}
		p.keywords = "0x" + strings.ToUpper(parts[1][2:])
	}
	if len(parts) > 2 {
		l, err := strconv.Atoi(parts[2])
		if err != nil || l < 1 || l > 255 {
			return wprUserProvider{}, bad("the level must be 1 (critical) to 5 (verbose), or up to 255")
		}
		p.level = l
	}
	return p, nil
}

// wprProfileEvents sorts a profile's events into system keywords and
// stacks (in the profile's order, without repeats) and user providers.
func wprProfileEvents(p capture.Profile) (keywords, stacks []string, providers []wprUserProvider, err error) {
	if len(p.Events) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: WPR profile %q lists no events", capture.ErrInvalid, p.Name)
	}
	seen := map[string]bool{}
	for _, ev := range p.Events {
		if strings.HasPrefix(ev, wprProviderPrefix) {
			up, err := parseWPRProvider(ev)
			if err != nil {
				return nil, nil, nil, err
			}
			if seen["provider:"+strings.ToLower(up.name)] {
				return nil, nil, nil, fmt.Errorf("%w: WPR profile %q lists provider %q twice", capture.ErrInvalid, p.Name, up.name)
			}
			seen["provider:"+strings.ToLower(up.name)] = true
			providers = append(providers, up)
			continue
		}
		se, ok := wprSystemEvents[ev]
		if !ok {
			return nil, nil, nil, fmt.Errorf("%w: WPR profile %q: unknown event %q (system events: %s; user providers: provider:<name>[:0x<mask>[:<level>]])",
				capture.ErrInvalid, p.Name, ev, strings.Join(wprSystemEventNames(), ", "))
		}
		for _, k := range se.keywords {
			if !slices.Contains(keywords, k) {
				keywords = append(keywords, k)
			}
		}
		for _, s := range se.stacks {
			if !slices.Contains(stacks, s) {
				stacks = append(stacks, s)
			}
		}
	}
	if len(keywords) == 0 {
		// WPR always runs a system collector; with no kernel keyword at
		// all WPA could not even name the processes the providers log.
		return nil, nil, nil, fmt.Errorf("%w: WPR profile %q has no system event (at least ProcessThread and Loader, so the trace names processes and modules)", capture.ErrInvalid, p.Name)
	}
	return keywords, stacks, providers, nil
}

func wprSystemEventNames() []string {
	names := make([]string, 0, len(wprSystemEvents))
	for n := range wprSystemEvents {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ETW buffer sizes tried, largest first. ETW needs at least two buffers per
// CPU (each CPU fills its own current buffer), so a small ring on a large
// machine gets smaller buffers rather than too few.
var wprBufferSizesKB = []int{1024, 512, 256, 128, 64}

// wprBuffers lays a ring of totalKB out as ETW buffers for cpus CPUs.
func wprBuffers(totalKB, cpus int) (sizeKB, count int, err error) {
	for _, size := range wprBufferSizesKB {
		if n := totalKB / size; n >= 2*cpus {
			return size, n, nil
		}
	}
	smallest := wprBufferSizesKB[len(wprBufferSizesKB)-1]
	return 0, 0, fmt.Errorf("%w: a WPR ring of %d KiB is too small for %d CPUs: ETW needs two buffers per CPU, at least %d KiB",
		capture.ErrInvalid, totalKB, cpus, 2*cpus*smallest)
}

// When a profile has user providers they get their own event collector
// (another ETW session) and this share of the ring; the kernel's events,
// far more numerous, keep the rest.
const wprEventCollectorShare = 4 // 1/4

// wprLayout is how a ring is split between the two collectors.
type wprLayout struct {
	systemBufKB, systemBufs int
	eventBufKB, eventBufs   int // zero without user providers
}

func wprRingLayout(ringKB, cpus int, withEvents bool) (wprLayout, error) {
	var l wprLayout
	sysKB := ringKB
	var err error
	if withEvents {
		evKB := ringKB / wprEventCollectorShare
		sysKB = ringKB - evKB
		if l.eventBufKB, l.eventBufs, err = wprBuffers(evKB, cpus); err != nil {
			return l, fmt.Errorf("the user providers' quarter of the ring: %w", err)
		}
	}
	l.systemBufKB, l.systemBufs, err = wprBuffers(sysKB, cpus)
	return l, err
}

// The .wprp document. Field order is element order.
type wprpDocument struct {
	XMLName  xml.Name     `xml:"WindowsPerformanceRecorder"`
	Version  string       `xml:"Version,attr"`
	Author   string       `xml:"Author,attr,omitempty"`
	Profiles wprpProfiles `xml:"Profiles"`
}

type wprpProfiles struct {
	SystemCollector wprpCollector       `xml:"SystemCollector"`
	EventCollector  *wprpCollector      `xml:"EventCollector,omitempty"`
	SystemProvider  wprpSystemProvider  `xml:"SystemProvider"`
	EventProviders  []wprpEventProvider `xml:"EventProvider"`
	Profiles        []wprpProfile       `xml:"Profile"`
}

type wprpValue struct {
	Value string `xml:"Value,attr"`
}

type wprpCollector struct {
	ID         string    `xml:"Id,attr"`
	Name       string    `xml:"Name,attr"`
	BufferSize wprpValue `xml:"BufferSize"` // KiB
	Buffers    wprpValue `xml:"Buffers"`    // a count
}

type wprpSystemProvider struct {
	ID       string       `xml:"Id,attr"`
	Keywords wprpKeywords `xml:"Keywords"`
	Stacks   *wprpStacks  `xml:"Stacks,omitempty"`
}

// The schema wants at least one child in <Keywords> and <Stacks>, so an
// empty list is a missing element, not an empty one.
type wprpKeywords struct {
	Keyword []wprpValue `xml:"Keyword"`
}

type wprpStacks struct {
	Stack []wprpValue `xml:"Stack"`
}

type wprpEventProvider struct {
	ID       string        `xml:"Id,attr"`
	Name     string        `xml:"Name,attr"`
	Level    string        `xml:"Level,attr,omitempty"`
	Keywords *wprpKeywords `xml:"Keywords,omitempty"`
}

type wprpProfile struct {
	ID          string         `xml:"Id,attr"`
	Name        string         `xml:"Name,attr"`
	Description string         `xml:"Description,attr"`
	LoggingMode string         `xml:"LoggingMode,attr"`
	DetailLevel string         `xml:"DetailLevel,attr"`
	Collectors  wprpCollectors `xml:"Collectors"`
}

type wprpCollectors struct {
	System wprpSystemCollectorID `xml:"SystemCollectorId"`
	Events *wprpEventCollectorID `xml:"EventCollectorId,omitempty"`
}

type wprpSystemCollectorID struct {
	Value    string    `xml:"Value,attr"`
	Provider wprpValue `xml:"SystemProviderId"`
}

type wprpEventCollectorID struct {
	Value     string      `xml:"Value,attr"`
	Providers []wprpValue `xml:"EventProviders>EventProviderId"`
}

// wprProfileXML generates the .wprp for profile p with a ring of ringKB
// (the whole ring, not per CPU: ETW's buffers are one pool every CPU
// draws from, and in memory mode that pool is the ring) on a machine of
// cpus CPUs. description is free text for the profile's Description.
//
// The file holds a Memory and a File version of the one profile, because
// WPR wants both modes defined for a custom profile; spikehunt starts the
// Memory one (no -filemode).
func wprProfileXML(p capture.Profile, ringKB, cpus int, description string) ([]byte, error) {
	switch p.CallGraph {
	case "", "fp":
	default:
		return nil, fmt.Errorf("%w: WPR profile %q: call graph %q is a perf mode; the Windows kernel walks the stacks itself", capture.ErrInvalid, p.Name, p.CallGraph)
	}
	if p.FrequencyHz != 0 {
		return nil, fmt.Errorf("%w: WPR profile %q: the sampling rate is machine-wide on Windows (wpr -setprofint) and spikehunt leaves it alone; drop frequency_hz", capture.ErrInvalid, p.Name)
	}
	keywords, stacks, providers, err := wprProfileEvents(p)
	if err != nil {
		return nil, err
	}
	layout, err := wprRingLayout(ringKB, cpus, len(providers) > 0)
	if err != nil {
		return nil, err
	}

	doc := wprpDocument{Version: "1.0", Author: "spikehunt"}
	ps := &doc.Profiles
	ps.SystemCollector = wprpCollector{
		ID: wprSystemCollectorID, Name: "SpikeHunt System Collector",
		BufferSize: wprpValue{strconv.Itoa(layout.systemBufKB)},
		Buffers:    wprpValue{strconv.Itoa(layout.systemBufs)},
	}
	ps.SystemProvider = wprpSystemProvider{ID: wprSystemProviderID}
	for _, k := range keywords {
		ps.SystemProvider.Keywords.Keyword = append(ps.SystemProvider.Keywords.Keyword, wprpValue{k})
	}
	if len(stacks) > 0 {
		ps.SystemProvider.Stacks = &wprpStacks{}
		for _, s := range stacks {
			ps.SystemProvider.Stacks.Stack = append(ps.SystemProvider.Stacks.Stack, wprpValue{s})
		}
	}
	var eventIDs *wprpEventCollectorID
	if len(providers) > 0 {
		ps.EventCollector = &wprpCollector{
			ID: wprEventCollectorID, Name: "SpikeHunt Event Collector",
			BufferSize: wprpValue{strconv.Itoa(layout.eventBufKB)},
			Buffers:    wprpValue{strconv.Itoa(layout.eventBufs)},
		}
		eventIDs = &wprpEventCollectorID{Value: wprEventCollectorID}
		for i, up := range providers {
			ep := wprpEventProvider{ID: fmt.Sprintf("spikehunt.provider.%d", i+1), Name: up.name}
			if up.level != 0 {
				ep.Level = strconv.Itoa(up.level)
			}
			if up.keywords != "" {
				ep.Keywords = &wprpKeywords{Keyword: []wprpValue{{up.keywords}}}
			}
			ps.EventProviders = append(ps.EventProviders, ep)
			eventIDs.Providers = append(eventIDs.Providers, wprpValue{ep.ID})
		}
	}
	for _, mode := range []string{"Memory", "File"} {
		ps.Profiles = append(ps.Profiles, wprpProfile{
			ID:          wprProfileName + ".Verbose." + mode,
			Name:        wprProfileName,
			Description: description,
			LoggingMode: mode,
			DetailLevel: "Verbose",
			Collectors: wprpCollectors{
				System: wprpSystemCollectorID{Value: wprSystemCollectorID, Provider: wprpValue{wprSystemProviderID}},
				Events: eventIDs,
			},
		})
	}

	out, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("wpr: encode the recording profile: %w", err)
	}
	return append(append([]byte(xml.Header), out...), '\n'), nil
}
