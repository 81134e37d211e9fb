// Command kindconformance reads the JSON report ginkgo wrote for a run of
// e2e.test against a kind cluster (hack/kind-conformance) and prints
// "N passed, N failed, N skipped", every failed spec with where and why,
// and exits 1 when a spec or a suite node failed.
//
//	kindconformance -report report.json
//	kindconformance -skip-list FILE   print the list's patterns joined by |
//	kindconformance -refs e2e.json    print the image refs hack/e2e-images built, one a line
//	kindconformance -forward TARGET -listen ADDR -addr-file FILE
//	                                  forward TCP from ADDR (port 0: a free one, written
//	                                  to FILE once listening) to TARGET until SIGTERM
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	report := flag.String("report", "", "ginkgo's JSON report")
	skipList := flag.String("skip-list", "", "print this skip list's patterns joined by |")
	refs := flag.String("refs", "", "print the refs of hack/e2e-images' list, one a line")
	target := flag.String("forward", "", "forward TCP connections to this address")
	listen := flag.String("listen", "", "with -forward: the address to listen on")
	addrFile := flag.String("addr-file", "", "with -forward: write the address listened on here")
	flag.Parse()
	switch {
	case *target != "":
		if *listen == "" || *addrFile == "" {
			fatal(errors.New("-forward needs -listen and -addr-file"))
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			fatal(err)
		}
		// Renamed into place: whoever waits for the file reads it whole.
		if err := os.WriteFile(*addrFile+".tmp", []byte(l.Addr().String()+"\n"), 0o644); err != nil {
			fatal(err)
		}
		if err := os.Rename(*addrFile+".tmp", *addrFile); err != nil {
			fatal(err)
		}
		if err := forward(ctx, l, *target); err != nil {
			fatal(err)
		}
	case *refs != "":
		data, err := os.ReadFile(*refs)
		if err != nil {
			fatal(err)
		}
		var images []struct{ Refs []string }
		if err := json.Unmarshal(data, &images); err != nil {
			fatal(fmt.Errorf("%s: %w", *refs, err))
		}
		for _, im := range images {
			for _, r := range im.Refs {
				fmt.Println(r)
			}
		}
	case *skipList != "":
		f, err := os.Open(*skipList)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		res, err := parseSkipList(f)
		if err != nil {
			fatal(fmt.Errorf("%s: %w", *skipList, err))
		}
		fmt.Println(strings.Join(res, "|"))
	case *report != "":
		data, err := os.ReadFile(*report)
		if err != nil {
			fatal(err)
		}
		c, err := count(data)
		if err != nil {
			fatal(fmt.Errorf("%s: %w", *report, err))
		}
		c.print(os.Stdout)
		if c.failed > 0 {
			os.Exit(1)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "kindconformance:", err)
	os.Exit(2)
}

// parseSkipList reads lines "PATTERN  # reason"; blank lines and lines
// starting with # are comments. An entry without a reason is an error:
// every skip says why.
func parseSkipList(r io.Reader) ([]string, error) {
	var res []string
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		re, reason, ok := strings.Cut(line, " # ")
		if !ok || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("line %d: %q has no ' # reason'", n, line)
		}
		res = append(res, strings.TrimSpace(re))
	}
	return res, sc.Err()
}

// The parts of ginkgo's JSON report (types.Report) read here.
type ginkgoReport struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeType            string
		LeafNodeText            string
		State                   string
		RunTime                 time.Duration
		Failure                 struct {
			Message  string
			Location struct {
				FileName   string
				LineNumber int
			}
		}
	}
}

type counts struct {
	passed, failed, skipped, notSelected int
	failures, skips                      []string
}

// count tells the specs that ran and passed or failed from those skipped
// at run time (a Skip() call, with a message) and those the focus and skip
// patterns did not select (skipped without a message): only the first
// two kinds are "skipped" here.
func count(data []byte) (*counts, error) {
	var reports []ginkgoReport
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, err
	}
	if len(reports) == 0 {
		return nil, errors.New("no suite in the report")
	}
	c := &counts{}
	for _, r := range reports {
		for _, s := range r.SpecReports {
			text := strings.TrimSpace(strings.Join(append(append([]string(nil), s.ContainerHierarchyTexts...), s.LeafNodeText), " "))
			if s.LeafNodeType != "It" {
				if s.State != "passed" && s.State != "skipped" {
					c.failed++
					c.failures = append(c.failures, fmt.Sprintf("%s [%s]: %s", s.LeafNodeType, s.State, oneLine(s.Failure.Message)))
				}
				continue
			}
			switch {
			case s.State == "passed":
				c.passed++
			case s.State == "skipped" && s.Failure.Message == "":
				c.notSelected++
			case s.State == "skipped" || s.State == "pending":
				c.skipped++
				c.skips = append(c.skips, fmt.Sprintf("%s: %s", text, oneLine(s.Failure.Message)))
			default:
				c.failed++
				c.failures = append(c.failures, fmt.Sprintf("%s [%s] (%s:%d, %.0fs): %s", text, s.State,
					filepath.Base(s.Failure.Location.FileName), s.Failure.Location.LineNumber, s.RunTime.Seconds(), oneLine(s.Failure.Message)))
			}
		}
	}
	sort.Strings(c.failures)
	sort.Strings(c.skips)
	return c, nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func (c *counts) print(w io.Writer) {
	for _, s := range c.skips {
		fmt.Fprintf(w, "  [SKIPPED] %s\n", s)
	}
	for _, f := range c.failures {
		fmt.Fprintf(w, "  [FAILED] %s\n", f)
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped (%d not selected)\n", c.passed, c.failed, c.skipped, c.notSelected)
}
