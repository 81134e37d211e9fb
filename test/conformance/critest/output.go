package main

import (
	"regexp"
	"strings"
)

var (
	summaryStart = regexp.MustCompile(`^(Summarizing [0-9]+ Failure|Ran [0-9]+ of [0-9]+ Specs)`)
	skipReason   = regexp.MustCompile(`^  \[SKIPPED\] (.*)$`)
)

// summarize picks out of critest's -ginkgo.v output each skipped spec with
// its reason ("  [SKIPPED] <spec>: <reason>"), then ginkgo's summary
// (failures and counts); of a succinct run's output (-benchmark), its last
// line.
func summarize(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var b strings.Builder
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "S [SKIPPED]") || i+1 >= len(lines) {
			continue
		}
		name := lines[i+1]
		for j := i + 2; j < len(lines) && !strings.HasPrefix(lines[j], "S [SKIPPED]"); j++ {
			if strings.HasPrefix(lines[j], "  [SKIPPED] in [") {
				continue
			}
			if m := skipReason.FindStringSubmatch(lines[j]); m != nil {
				b.WriteString("  [SKIPPED] " + name + ": " + m[1] + "\n")
				i = j
				break
			}
		}
	}
	for i, l := range lines {
		if summaryStart.MatchString(l) {
			b.WriteString(strings.Join(lines[i:], "\n") + "\n")
			return b.String()
		}
	}
	if len(lines) > 0 {
		b.WriteString(lines[len(lines)-1] + "\n")
	}
	return b.String()
}
