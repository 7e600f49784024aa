package growth

import "syscall"

// mmapTouched maps n bytes outside the Go heap, writes every page, and
// returns the function that unmaps them: resident memory the garbage
// collector cannot hold on to.
func mmapTouched(n int) (unmap func() error, err error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	return func() error { return syscall.Munmap(b) }, nil
}
