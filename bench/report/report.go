// Package report holds what the bench tool's benchmarks share in their
// reports: nearest-rank percentiles, Markdown tables and JSON report files.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// Rank is the nearest-rank q-quantile (0 < q <= 1) of sorted samples, which
// must not be empty: with 20 samples the 0.99 quantile is the largest.
func Rank(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Percentile is the nearest-rank q-quantile of unsorted samples, NaN for
// none (a table prints it as "–").
func Percentile(samples []float64, q float64) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return Rank(s, q)
}

// Num formats a figure with prec decimals, "–" where there is none (NaN or
// an infinite ratio).
func Num(x float64, prec int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

// ReadJSON decodes the JSON file at path into v; a decoding error names
// the file.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// NumericColumns marks the columns to right-align: every one but the
// first whose non-empty cells are all numbers.
func NumericColumns(header []string, lines [][]string) []bool {
	numeric := make([]bool, len(header))
	for i := 1; i < len(header); i++ {
		numeric[i] = true
		for _, l := range lines {
			if i < len(l) && l[i] != "" && strings.Trim(l[i], "0123456789.-") != "" {
				numeric[i] = false
			}
		}
	}
	return numeric
}

// Markdown writes a Markdown table with its columns padded to one width,
// those marked in right aligned (the separator says so with a colon). A
// line shorter than the header gets empty cells.
func Markdown(w io.Writer, header []string, lines [][]string, right []bool) {
	width := make([]int, len(header))
	for i, h := range header {
		width[i] = len([]rune(h))
	}
	for _, l := range lines {
		for i, c := range l {
			if i < len(width) && len([]rune(c)) > width[i] {
				width[i] = len([]rune(c))
			}
		}
	}
	pad := func(s string, n int, right bool) string {
		gap := strings.Repeat(" ", max(0, n-len([]rune(s))))
		if right {
			return gap + s
		}
		return s + gap
	}
	out := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for i := range header {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			b.WriteString(" " + pad(c, width[i], right[i]) + " |")
		}
		fmt.Fprintln(w, b.String())
	}
	out(header)
	var sep strings.Builder
	sep.WriteString("|")
	for i := range header {
		if right[i] {
			sep.WriteString(" " + strings.Repeat("-", width[i]-1) + ": |")
		} else {
			sep.WriteString(" " + strings.Repeat("-", width[i]) + " |")
		}
	}
	fmt.Fprintln(w, sep.String())
	for _, l := range lines {
		out(l)
	}
}
