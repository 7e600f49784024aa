package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcCPU is a process's user and system CPU time in seconds, from
// /proc/<pid>/stat (utime and stime, in USER_HZ = 100 ticks); zero when
// the process is gone.
func ProcCPU(pid int) (user, sys float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the parenthesised command name, which may hold spaces;
	// utime and stime are the 14th and 15th fields of the line.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return ut / 100, st / 100
}
