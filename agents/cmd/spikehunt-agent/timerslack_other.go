//go:build !linux

package main

// applyTimerSlack does nothing: timer slack is a Linux setting.
func applyTimerSlack([]string) {}
