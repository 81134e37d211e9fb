package report

import (
	"math"
	"strings"
	"testing"
)

func TestPercentile(t *testing.T) {
	s := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct{ q, want float64 }{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := Percentile(s, c.q); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("no samples: want NaN")
	}
	if s[0] != 5 {
		t.Error("Percentile sorted its argument")
	}
}

func TestMarkdown(t *testing.T) {
	for _, tt := range []struct {
		name  string
		lines [][]string
		right []bool
		want  string
	}{
		{
			name:  "numbers right aligned",
			lines: [][]string{{"pod start", "1.5", "12.25"}, {"exec", "0.3"}},
			want: "| figure    |   a |     b |\n" +
				"| --------- | --: | ----: |\n" +
				"| pod start | 1.5 | 12.25 |\n" +
				"| exec      | 0.3 |       |\n",
		},
		{
			name:  "a column with text stays left",
			lines: [][]string{{"x", "1", "yes"}},
			want: "| figure | a | b   |\n" +
				"| ------ | : | --- |\n" +
				"| x      | 1 | yes |\n",
		},
		{
			name:  "alignment given",
			lines: [][]string{{"x", "–", "yes"}},
			right: []bool{false, true, true},
			want: "| figure | a |   b |\n" +
				"| ------ | : | --: |\n" +
				"| x      | – | yes |\n",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			header := []string{"figure", "a", "b"}
			right := tt.right
			if right == nil {
				right = NumericColumns(header, tt.lines)
			}
			var b strings.Builder
			Markdown(&b, header, tt.lines, right)
			if b.String() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestNum(t *testing.T) {
	for _, tt := range []struct {
		x    float64
		prec int
		want string
	}{{1.234, 2, "1.23"}, {2, 0, "2"}, {math.NaN(), 1, "–"}, {math.Inf(1), 2, "–"}} {
		if got := Num(tt.x, tt.prec); got != tt.want {
			t.Errorf("Num(%v, %d) = %q, want %q", tt.x, tt.prec, got, tt.want)
		}
	}
}
