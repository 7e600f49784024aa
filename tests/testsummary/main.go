// Command testsummary reads `go test -json` on stdin and prints what a person
// wants from a long run: one line per package as it finishes, the output of
// every failing test, and a closing line "N passed, N failed, N skipped".
// It exits 1 when anything failed, so `make test` fails with it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	var (
		passed, failed, skipped int
		output                  = map[string][]string{} // package/test → lines
		failures                []string
		skips                   []string
		pkgFailed               bool
	)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		var e event
		if err := json.Unmarshal(in.Bytes(), &e); err != nil {
			fmt.Println(in.Text()) // build errors and other plain lines
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			output[key] = append(output[key], e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				status := map[string]string{"pass": "ok  ", "fail": "FAIL", "skip": "?   "}[e.Action]
				fmt.Printf("%s %s %.1fs\n", status, e.Package, e.Elapsed)
				if e.Action == "fail" {
					pkgFailed = true
					failures = append(failures, key)
				}
				continue
			}
			if strings.Contains(e.Test, "/") { // count top-level tests only
				if e.Action == "fail" {
					failures = append(failures, key)
				}
				continue
			}
			switch e.Action {
			case "pass":
				passed++
			case "fail":
				failed++
				failures = append(failures, key)
			case "skip":
				skipped++
				skips = append(skips, key)
			}
			if e.Action != "fail" {
				delete(output, key)
			}
		}
	}
	sort.Strings(failures)
	for _, k := range failures {
		if lines := output[k]; len(lines) > 0 {
			fmt.Printf("\n--- output of %s\n%s", k, strings.Join(lines, ""))
		}
	}
	for _, k := range skips {
		fmt.Printf("skipped: %s\n", k)
	}
	fmt.Printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || pkgFailed {
		os.Exit(1)
	}
}
