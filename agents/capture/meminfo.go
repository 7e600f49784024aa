package capture

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// procMemAvailable is the host's MemAvailable over MemTotal, from
// /proc/meminfo.
func procMemAvailable() (float64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return memAvailableShare(b)
}

// memAvailableShare reads MemTotal and MemAvailable (kB) from a
// /proc/meminfo text.
func memAvailableShare(meminfo []byte) (float64, error) {
	var total, avail float64
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		var dst *float64
		switch string(f[0]) {
		case "MemTotal:":
			dst = &total
		case "MemAvailable:":
			dst = &avail
		default:
			continue
		}
		v, err := strconv.ParseUint(string(f[1]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("meminfo: %s %q: %w", f[0], f[1], err)
		}
		*dst = float64(v)
		seen++
	}
	if seen < 2 || total == 0 {
		return 0, fmt.Errorf("meminfo: no MemTotal and MemAvailable")
	}
	return avail / total, nil
}
