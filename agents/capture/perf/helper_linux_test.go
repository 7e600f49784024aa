package perf

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// requestHelperEnv makes the test binary a request process instead of
// running the tests: one OS thread, whose id it prints first ("tid N"),
// serving the requests it reads from stdin one a line and answering
// "done" after each (causes_linux_test.go). A process of its own so that
// it can be put into a cgroup, and a thread that lives on after its
// requests so that the capture names its cgroups at seal time, as it
// would a server's.
const requestHelperEnv = "SPIKEHUNT_TEST_REQUEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(requestHelperEnv) == "1" {
		os.Exit(serveRequests())
	}
	os.Exit(m.Run())
}

// serveRequests serves:
//
//	write PATH MIB  write MIB MiB to PATH in 1 MiB writes (page cache)
//	fault PATH      map PATH, drop its page cache, and read a byte of
//	                each page with readahead off: a major fault a page
//	quit            exit
func serveRequests() int {
	runtime.LockOSThread()
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "tid %d\n", unix.Gettid())
	out.Flush()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch {
		case f[0] == "write" && len(f) == 3:
			err = writeMiB(f[1], f[2])
		case f[0] == "fault" && len(f) == 2:
			err = faultFile(f[1])
		case f[0] == "quit":
			return 0
		default:
			err = fmt.Errorf("unknown request %q", sc.Text())
		}
		if err != nil {
			fmt.Fprintf(out, "error %v\n", err)
		} else {
			fmt.Fprintln(out, "done")
		}
		out.Flush()
	}
	return 0
}

func writeMiB(path, mib string) error {
	n, err := strconv.Atoi(mib)
	if err != nil {
		return err
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for range n {
		if _, err := unix.Write(fd, buf); err != nil {
			return err
		}
	}
	return nil
}

func faultFile(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return err
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
		return err
	}
	sum := 0
	for i := 0; i < len(mem); i += os.Getpagesize() {
		sum += int(mem[i])
	}
	runtime.KeepAlive(sum)
	return nil
}
