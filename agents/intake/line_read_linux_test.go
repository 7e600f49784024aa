package intake

import (
	"syscall"
	"testing"
)

// parseCredentials reads the control messages by hand so as not to
// allocate: hold it to the syscall package's parser on any bytes.
func FuzzParseCredentials(f *testing.F) {
	f.Add(syscall.UnixCredentials(&syscall.Ucred{Pid: 4711, Uid: 1000, Gid: 100}))
	f.Add(append(syscall.UnixRights(3), syscall.UnixCredentials(&syscall.Ucred{Pid: 1, Uid: 0, Gid: 0})...))
	f.Add([]byte{})
	f.Add(make([]byte, 17))
	f.Fuzz(func(t *testing.T, oob []byte) {
		uid, gid, pid, ok := parseCredentials(oob)
		msgs, err := syscall.ParseSocketControlMessage(oob)
		var want *syscall.Ucred
		if err == nil {
			for _, m := range msgs {
				if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_CREDENTIALS {
					if c, err := syscall.ParseUnixCredentials(&m); err == nil {
						want = c
						break
					}
				}
			}
		}
		switch {
		case want == nil && ok:
			// The syscall parser gives up on a whole buffer whose tail is
			// malformed; parseCredentials stops at the first
			// credentials, which the kernel always writes first.
			if err == nil {
				t.Fatalf("found credentials %d/%d/%d where the syscall package finds none", uid, gid, pid)
			}
		case want != nil && (!ok || uid != want.Uid || gid != want.Gid || pid != want.Pid):
			t.Fatalf("parseCredentials = %d/%d/%d %v, want %+v", uid, gid, pid, ok, *want)
		}
	})
}
