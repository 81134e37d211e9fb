// Package ginkgoreport reads ginkgo v2's JSON report (--json-report) into
// the counts and the lines a test runner prints: passed, failed, skipped
// and not selected specs, with names, failure places and durations.
package ginkgoreport

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// report is the part of ginkgo's types.Report read here.
type report struct {
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

// Summary is a report's specs by outcome. A spec skipped without a
// message was not selected (focus, skip); one skipped with one (or
// pending) was selected and skipped itself. A suite node (BeforeSuite,
// AfterSuite ...) that did not pass is a failure.
type Summary struct {
	Suites                               int // the report's suites: 0 if ginkgo ran none
	Passed, Failed, Skipped, NotSelected int
	// PassedNames and NotSelectedNames are the specs' full names
	// (containers and leaf) in the report's order.
	PassedNames, NotSelectedNames []string
	// Failures are "name [state] (file:line, Ns): message", Skips
	// "name: message", sorted.
	Failures, Skips []string
}

// Read reads the JSON report at path.
func Read(path string) (*Summary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads a JSON report's text.
func Parse(data []byte) (*Summary, error) {
	var reports []report
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, err
	}
	s := &Summary{Suites: len(reports)}
	for _, r := range reports {
		for _, spec := range r.SpecReports {
			name := strings.TrimSpace(strings.Join(append(append([]string(nil), spec.ContainerHierarchyTexts...), spec.LeafNodeText), " "))
			msg := OneLine(spec.Failure.Message)
			if spec.LeafNodeType != "It" {
				if spec.State != "passed" && spec.State != "skipped" {
					s.Failed++
					s.Failures = append(s.Failures, fmt.Sprintf("%s [%s]: %s", spec.LeafNodeType, spec.State, msg))
				}
				continue
			}
			switch {
			case spec.State == "passed":
				s.Passed++
				s.PassedNames = append(s.PassedNames, name)
			case spec.State == "skipped" && spec.Failure.Message == "":
				s.NotSelected++
				s.NotSelectedNames = append(s.NotSelectedNames, name)
			case spec.State == "skipped" || spec.State == "pending":
				s.Skipped++
				s.Skips = append(s.Skips, fmt.Sprintf("%s: %s", name, msg))
			default:
				s.Failed++
				s.Failures = append(s.Failures, fmt.Sprintf("%s [%s] (%s:%d, %.0fs): %s", name, spec.State,
					filepath.Base(spec.Failure.Location.FileName), spec.Failure.Location.LineNumber, spec.RunTime.Seconds(), msg))
			}
		}
	}
	sort.Strings(s.Failures)
	sort.Strings(s.Skips)
	return s, nil
}

// OneLine is the start of a failure message on one line: gomega's
// "Expected <x> to equal <y>" spans several.
func OneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
