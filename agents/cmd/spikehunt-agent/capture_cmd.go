package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/control"
)

const captureUsage = `Usage: spikehunt-agent capture COMMAND [flags]

Arms, fires and collects flight recorders on this host by hand, through the
running agent's control socket (root only). For debugging without Kubernetes.

Commands:
  backends                 which backends this host can run
  arm  --backend B [flags] arm a capture; it fires on the local trigger or on "fire"
  fire ID [--reason R]     fire an armed capture now
  collect ID [--out DIR]   wait until a capture is collected (or fails), print it, and
                           with --out download its files (sha256-checked) and metadata
  wait ID                  collect without downloading
  get  ID                  one capture, as JSON
  list                     every capture the agent knows
  disarm ID                stop a capture and drop its files

Example: catch the next request of service "checkout" slower than 500 ms,
with 10 s before and 2 s after it:
  spikehunt-agent capture arm --backend perf --service checkout --latency 500ms --pre 10s --post 2s
  spikehunt-agent capture wait <id>
`

func runCaptureCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, captureUsage)
		if len(args) == 0 {
			return errUsage
		}
		return flag.ErrHelp
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("spikehunt-agent capture "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	sock := fs.String("socket", defaultCaptureConfig().Socket, "the agent's capture control socket")
	asJSON := fs.Bool("json", false, "print JSON")
	var req control.ArmRequest
	var reason, outDir string
	timeout := 5 * time.Minute
	switch cmd {
	case "arm":
		fs.StringVar(&req.ID, "id", "", "capture id (default: <backend>-<time>)")
		fs.StringVar(&req.Backend, "backend", capture.Perf, "perf, ftrace, bpftrace or wpr")
		fs.StringVar(&req.Profile, "profile", "", "named profile (default: the backend's default)")
		fs.StringVar(&req.Script, "script", "", "bpftrace: a script name from the agent's allow-listed folder")
		fs.IntVar(&req.RingKB, "ring-kb", 0, "ring size per CPU in KiB (default: the profile's)")
		fs.StringVar(&req.Pre, "pre", "10s", "how much before the fire to keep")
		fs.StringVar(&req.Post, "post", "2s", "how long to keep recording after the fire")
		fs.StringVar(&req.Service, "service", "", "local trigger: the service whose requests to watch")
		fs.StringVar(&req.Endpoint, "endpoint", "", "local trigger: only this endpoint")
		fs.StringVar(&req.Latency, "latency", "", "local trigger: fire on one request slower than this")
		fs.StringVar(&req.P99, "p99", "", "local trigger: fire when a second's p99 is over this")
		fs.StringVar(&req.Cooldown, "cooldown", "", "local trigger: quiet time after a fire")
	case "fire":
		fs.StringVar(&reason, "reason", "", "why (kept in the capture's metadata)")
	case "wait", "collect":
		fs.DurationVar(&timeout, "timeout", timeout, "how long to wait")
		if cmd == "collect" {
			fs.StringVar(&outDir, "out", "", "download the artifact's files and metadata.json into this folder")
		}
	case "get", "list", "disarm", "backends":
	default:
		fmt.Fprintf(stderr, "unknown capture command %q\n\n%s", cmd, captureUsage)
		return errUsage
	}
	// Flags may follow the id: "fire ID --reason x".
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	needID := cmd == "fire" || cmd == "wait" || cmd == "collect" || cmd == "get" || cmd == "disarm"
	if needID != (len(pos) == 1) || (!needID && len(pos) > 0) {
		if needID {
			fmt.Fprintf(stderr, "capture %s needs one capture id\n", cmd)
		} else {
			fmt.Fprintf(stderr, "capture %s takes no arguments, got %q\n", cmd, pos)
		}
		return errUsage
	}
	c := control.NewClient(*sock)
	var out any
	var err error
	switch cmd {
	case "backends":
		var m map[string]string
		err, out = c.Do(ctx, http.MethodGet, "/v1/backends", nil, &m), m
	case "list":
		var l []control.Status
		err, out = c.Do(ctx, http.MethodGet, "/v1/captures", nil, &l), l
	case "arm":
		if req.ID == "" {
			req.ID = req.Backend + "-" + strconv.FormatInt(time.Now().UnixMilli(), 10)
		}
		if _, err := capture.SpecOf(req); err != nil { // say what is wrong before dialing
			return err
		}
		var st control.Status
		err, out = c.Do(ctx, http.MethodPost, "/v1/captures", req, &st), st
	case "fire":
		var st control.Status
		err, out = c.Do(ctx, http.MethodPost, "/v1/captures/"+url.PathEscape(pos[0])+"/fire", control.FireRequest{Reason: reason}, &st), st
	case "wait", "collect":
		var st control.Status
		wctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
		defer cancel()
		err, out = c.Do(wctx, http.MethodGet, "/v1/captures/"+url.PathEscape(pos[0])+"/wait?timeout="+timeout.String(), nil, &st), st
	case "get":
		var st control.Status
		err, out = c.Do(ctx, http.MethodGet, "/v1/captures/"+url.PathEscape(pos[0]), nil, &st), st
	case "disarm":
		var st control.Status
		err, out = c.Do(ctx, http.MethodDelete, "/v1/captures/"+url.PathEscape(pos[0]), nil, &st), st
	}
	if err != nil {
		return err
	}
	if st, ok := out.(control.Status); ok && cmd == "collect" && outDir != "" {
		if err := download(ctx, c, st, outDir); err != nil {
			return err
		}
	}
	if *asJSON || cmd == "get" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printCaptures(stdout, out)
	return nil
}

func printCaptures(w io.Writer, v any) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	defer tw.Flush()
	switch v := v.(type) {
	case map[string]string:
		fmt.Fprintln(tw, "BACKEND\tSTATUS")
		for _, n := range []string{capture.Perf, capture.Ftrace, capture.Bpftrace, capture.WPR} {
			if s, ok := v[n]; ok {
				fmt.Fprintf(tw, "%s\t%s\n", n, s)
			}
		}
	case []control.Status:
		fmt.Fprintln(tw, "ID\tBACKEND\tSTATE\tARMED\tFIRED\tLOCATION\tERROR")
		for _, s := range v {
			printStatus(tw, s)
		}
	case control.Status:
		fmt.Fprintln(tw, "ID\tBACKEND\tSTATE\tARMED\tFIRED\tLOCATION\tERROR")
		printStatus(tw, v)
		if md := v.Metadata; md != nil {
			tw.Flush()
			fmt.Fprintf(w, "\nwindow %s … %s, %d files, %d bytes, %d lost, %d overrun events, fire→dump %v\n",
				md.WindowStart.Format(time.RFC3339Nano), md.WindowEnd.Format(time.RFC3339Nano), len(md.Files), md.Bytes, md.Lost, md.Overruns, v.FireToDump.Round(time.Millisecond))
			for _, f := range md.Files {
				fmt.Fprintf(w, "  %s  %d bytes  sha256:%s\n", f.Name, f.Bytes, f.SHA256)
			}
		}
	}
}

func printStatus(w io.Writer, s control.Status) {
	fired := "-"
	if !s.FiredAt.IsZero() {
		fired = s.FiredAt.Format("15:04:05.000")
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Backend, s.State, s.ArmedAt.Format("15:04:05.000"), fired,
		dash(s.Location), dash(strings.ReplaceAll(s.Error, "\t", " ")))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// download copies a collected capture's files and metadata into dir.
func download(ctx context.Context, c *control.Client, st control.Status, dir string) error {
	if st.State != control.Collected || st.Metadata == nil {
		return fmt.Errorf("capture %s is %s, nothing to download (%s)", st.ID, st.State, st.Error)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range st.Metadata.Files {
		w, err := root.OpenFile(f.Name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
		if err != nil {
			return fmt.Errorf("download: %w", err)
		}
		err = c.Download(ctx, st.ID, f, w)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			root.Remove(f.Name)
			return err
		}
	}
	b, err := json.MarshalIndent(st.Metadata, "", "  ")
	if err != nil {
		return err
	}
	return root.WriteFile("metadata.json", append(b, '\n'), 0o640)
}
