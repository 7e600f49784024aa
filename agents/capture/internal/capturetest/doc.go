// Package capturetest holds the recorders' shared test fixture: an app
// whose slow request leaves the CPU, for the perf and ftrace tests to
// catch.
//
// It is Linux-only: the app parks its thread with nanosleep and reports
// the thread id the kernel's tracers record.
package capturetest
