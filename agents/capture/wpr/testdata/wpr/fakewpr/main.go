// Command fakewpr stands in for wpr.exe in the wpr backend's tests, since
// Windows can't run here. It appends each invocation's arguments as a JSON
// array to $FAKEWPR_DIR/calls.jsonl, keeps which instances are recording as
// files in $FAKEWPR_DIR, and answers like wpr: -stop writes a dummy .etl,
// commands on an instance that is not recording fail with 0xc5583000.
//
// Knobs: FAKEWPR_LOST, the "Events Lost" count -status prints for the
// system collector; FAKEWPR_STOP_LOST, a count for the "Events were lost"
// warning on -stop; FAKEWPR_FAIL=<-verb>, that verb fails as it does for a
// non-elevated user (0xc5585011); FAKEWPR_NO_SKIPPDBGEN=1, -stop rejects
// -skipPdbGen as an older wpr does; FAKEWPR_LOCALIZED=1, -status prints
// German labels.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	dir := os.Getenv("FAKEWPR_DIR")
	if dir == "" {
		die(2, "FAKEWPR_DIR is not set")
	}
	args := os.Args[1:]
	line, _ := json.Marshal(args)
	f, err := os.OpenFile(filepath.Join(dir, "calls.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		die(2, err.Error())
	}
	f.Write(append(line, '\n'))
	f.Close()

	fmt.Println("Microsoft Windows Performance Recorder Version 10.0.0 (fake)")
	fmt.Println("Copyright (c) Microsoft Corporation. All rights reserved.")
	fmt.Println()
	if len(args) == 0 {
		die(1, "\tInvalid command syntax.")
	}
	instance := "default"
	if i := slices.Index(args, "-instancename"); i >= 0 {
		if i != len(args)-2 {
			die(1, "\t-instancename must be the last parameter.")
		}
		instance, args = args[i+1], args[:i]
	}
	verb := args[0]
	if os.Getenv("FAKEWPR_FAIL") == verb {
		die(1, "\tFailed to enable the policy to profile system performance.\n\tError code: 0xc5585011")
	}
	marker := filepath.Join(dir, "recording-"+instance)
	_, err = os.Stat(marker)
	recording := err == nil
	notRecording := func() {
		die(1, "\tThere are no trace profiles running.\n\tError code: 0xc5583000")
	}

	switch verb {
	case "-start":
		// -start <file.wprp>!<profile> -recordtempto <dir>
		if len(args) != 4 || args[2] != "-recordtempto" {
			die(1, "\tInvalid command syntax.")
		}
		file, name, ok := strings.Cut(args[1], "!")
		if !ok || name == "" {
			die(1, "\tInvalid profile: "+args[1])
		}
		if _, err := os.Stat(file); err != nil {
			die(1, "\tThe profile file was not found: "+file)
		}
		if fi, err := os.Stat(args[3]); err != nil || !fi.IsDir() {
			die(1, "\tThe temp folder was not found: "+args[3])
		}
		if recording {
			die(1, "\tThe event collector was already running.\n\tError code: 0xc5580612")
		}
		if err := os.WriteFile(marker, []byte(args[1]), 0o644); err != nil {
			die(2, err.Error())
		}
	case "-marker":
		if len(args) != 2 {
			die(1, "\tInvalid command syntax.")
		}
		if !recording {
			notRecording()
		}
	case "-status":
		if !recording {
			notRecording()
		}
		lost := os.Getenv("FAKEWPR_LOST")
		if lost == "" {
			lost = "0"
		}
		if os.Getenv("FAKEWPR_LOCALIZED") == "1" {
			fmt.Printf("Die WPR-Aufzeichnung wird ausgeführt...\n\nVerlorene Ereignisse    : %s\n", lost)
			return
		}
		fmt.Printf("WPR recording is in progress...\r\n\r\nTime since start        : 00:00:05\r\nDropped event           : %s\r\nLogging mode            : Memory\r\n\r\n", lost)
		if len(args) > 1 && args[1] == "collectors" {
			fmt.Printf("Actively recording collectors:\r\n\r\nCollector Name          : WPR_initiated_%s_WPR System Collector\r\nBuffer Size (KB)        : 1024\r\nEvents Lost             : %s\r\n\r\n", instance, lost)
			fmt.Printf("Collector Name          : WPR_initiated_%s_SpikeHunt Event Collector\r\nBuffer Size (KB)        : 256\r\nEvents Lost             : 0\r\n", instance)
		}
	case "-stop":
		// -stop <file> [<problem description>] [-skipPdbGen]
		if len(args) < 2 || len(args) > 4 {
			die(1, "\tInvalid command syntax.")
		}
		if slices.Contains(args, "-skipPdbGen") && os.Getenv("FAKEWPR_NO_SKIPPDBGEN") == "1" {
			die(1, "\tInvalid command syntax.\n\tError code: 0xc5580601")
		}
		if !recording {
			notRecording()
		}
		if err := os.WriteFile(args[1], []byte("fake etl of "+instance+"\n"), 0o644); err != nil {
			die(1, err.Error())
		}
		os.Remove(marker)
		fmt.Println("\tThe trace was successfully saved.")
		if n := os.Getenv("FAKEWPR_STOP_LOST"); n != "" {
			fmt.Printf("\t\t%s Events were lost in this trace.  Data may be unreliable.\n", n)
		}
	case "-cancel":
		if len(args) != 1 {
			die(1, "\tInvalid command syntax.")
		}
		if !recording {
			notRecording()
		}
		os.Remove(marker)
	default:
		die(1, "\tInvalid command syntax: "+verb)
	}
}

func die(code int, msg string) {
	fmt.Println(msg)
	os.Exit(code)
}
