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
	"strings"
	"syscall"

	"github.com/berth-runtime/berth/test/ginkgoreport"
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
		s, err := readReport(*report)
		if err != nil {
			fatal(err)
		}
		printSummary(os.Stdout, s)
		if s.Failed > 0 {
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

// readReport reads ginkgo's JSON report at path; a report without a suite
// means ginkgo ran nothing, which is no pass.
func readReport(path string) (*ginkgoreport.Summary, error) {
	s, err := ginkgoreport.Read(path)
	if err != nil {
		return nil, err
	}
	if s.Suites == 0 {
		return nil, fmt.Errorf("%s: no suite in the report", path)
	}
	return s, nil
}

// printSummary prints the specs skipped at run time and the failed ones,
// then the counts. Only specs that called Skip() count as skipped; those
// the focus and skip patterns did not select are counted apart.
func printSummary(w io.Writer, s *ginkgoreport.Summary) {
	for _, sk := range s.Skips {
		fmt.Fprintf(w, "  [SKIPPED] %s\n", sk)
	}
	for _, f := range s.Failures {
		fmt.Fprintf(w, "  [FAILED] %s\n", f)
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped (%d not selected)\n", s.Passed, s.Failed, s.Skipped, s.NotSelected)
}
