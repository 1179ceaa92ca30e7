// Command vulncheck reads govulncheck's JSON output (-format json) on standard input and fails
// when the code calls a vulnerable symbol that the accepted list does not name.
//
// The accepted list (-accept FILE) holds one vulnerability a line: its id, then why it is
// accepted (what in this code keeps it from being reached). Blank lines and lines starting
// with # are ignored. An accepted id the scan no longer finds is reported, so the list stays
// short. Vulnerabilities in imported packages or required modules that the code does not call
// are counted, not failed.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// message is the part of a govulncheck JSON message this command reads.
type message struct {
	Config *struct {
		ScannerVersion string `json:"scanner_version"`
		DB             string `json:"db"`
	} `json:"config"`
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
			Receiver string `json:"receiver"`
			Position *struct {
				Filename string `json:"filename"`
				Line     int    `json:"line"`
			} `json:"position"`
		} `json:"trace"`
	} `json:"finding"`
}

// called is one vulnerability the code calls, with where.
type called struct {
	id, module, version, fixed string
	traces                     []string
}

func main() {
	accept := flag.String("accept", "", "file of accepted vulnerability ids, each with its reason")
	flag.Parse()
	n, err := run(os.Stdin, os.Stdout, *accept)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulncheck:", err)
		os.Exit(2)
	}
	if n > 0 {
		os.Exit(1)
	}
}

// run reports the called vulnerabilities in the stream r to w and returns how many are not
// accepted.
func run(r io.Reader, w io.Writer, acceptFile string) (int, error) {
	accepted, err := readAccepted(acceptFile)
	if err != nil {
		return 0, err
	}
	summaries := map[string]string{}
	calls := map[string]*called{}
	uncalled := map[string]bool{}
	scanned := false
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return 0, fmt.Errorf("read govulncheck output: %w", err)
		}
		if m.Config != nil {
			scanned = true
			fmt.Fprintf(w, "govulncheck %s, database %s\n", m.Config.ScannerVersion, m.Config.DB)
		}
		if m.OSV != nil {
			summaries[m.OSV.ID] = m.OSV.Summary
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 {
			continue
		}
		if f.Trace[0].Function == "" {
			uncalled[f.OSV] = true
			continue
		}
		c := calls[f.OSV]
		if c == nil {
			c = &called{id: f.OSV, module: f.Trace[0].Module, version: f.Trace[0].Version, fixed: f.FixedVersion}
			calls[f.OSV] = c
		}
		var path []string
		for i := len(f.Trace) - 1; i >= 0; i-- {
			fr := f.Trace[i]
			name := fr.Package + "." + fr.Function
			if fr.Receiver != "" {
				name = fr.Package + "." + strings.TrimPrefix(fr.Receiver, "*") + "." + fr.Function
			}
			if fr.Position != nil && i == len(f.Trace)-1 {
				name += fmt.Sprintf(" (%s:%d)", fr.Position.Filename, fr.Position.Line)
			}
			path = append(path, name)
		}
		if len(c.traces) < 3 {
			c.traces = append(c.traces, strings.Join(path, " → "))
		}
	}
	if !scanned {
		return 0, errors.New("no govulncheck run in the input (it did not start, or not with -format json)")
	}
	ids := make([]string, 0, len(calls))
	for id := range calls {
		ids = append(ids, id)
		delete(uncalled, id)
	}
	sort.Strings(ids)
	failed := 0
	for _, id := range ids {
		c := calls[id]
		fixed := c.fixed
		if fixed == "" {
			fixed = "no fixed version"
		}
		verdict := "CALLED"
		if why, ok := accepted[id]; ok {
			verdict = "accepted: " + why
		} else {
			failed++
		}
		fmt.Fprintf(w, "%s %s in %s@%s (fixed in %s): %s\n  %s\n", id, summaries[id], c.module, c.version, fixed, verdict, strings.Join(c.traces, "\n  "))
	}
	for id := range accepted {
		if calls[id] == nil {
			fmt.Fprintf(w, "%s is accepted but no longer called: take it off the list\n", id)
		}
	}
	fmt.Fprintf(w, "%d called vulnerabilities (%d not accepted); %d more in code that is not called\n", len(calls), failed, len(uncalled))
	return failed, nil
}

// readAccepted reads the accepted list: id and reason a line.
func readAccepted(name string) (map[string]string, error) {
	out := map[string]string{}
	if name == "" {
		return out, nil
	}
	b, err := os.ReadFile(name) //nolint:gosec // the accepted list is named by the Makefile
	if err != nil {
		return nil, err
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, why, _ := strings.Cut(line, " ")
		if strings.TrimSpace(why) == "" {
			return nil, fmt.Errorf("%s:%d: %s is accepted without a reason", name, i+1, id)
		}
		out[id] = strings.TrimSpace(why)
	}
	return out, nil
}
