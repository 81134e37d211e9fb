package density

import (
	"math"
	"strings"
	"testing"
)

func TestTableRatioIsBerthOverContainerd(t *testing.T) {
	for _, order := range [][]string{{"berth", "containerd"}, {"containerd", "berth"}} {
		var rs []*result
		for _, name := range order {
			r := &result{Runtime: name, PLEG: map[string]phase{}, DaemonRSS: map[string]float64{}}
			r.AllRunning = map[string]float64{"berth": 50, "containerd": 200}[name]
			rs = append(rs, r)
		}
		out := table(rs)
		if !strings.Contains(out, "| berth/containerd |") {
			t.Errorf("%v: no berth/containerd column:\n%s", order, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "| time to all Running") && !strings.HasSuffix(line, " 0.25 |") {
				t.Errorf("%v: %s, want the ratio 0.25", order, line)
			}
		}
	}
}

func TestNumJSON(t *testing.T) {
	for _, c := range []struct {
		n    num
		want string
	}{{num(math.NaN()), "null"}, {num(math.Inf(1)), "null"}, {1.5, "1.5"}} {
		b, err := c.n.MarshalJSON()
		if err != nil || string(b) != c.want {
			t.Errorf("%v: %s, %v; want %s", c.n, b, err, c.want)
		}
	}
	var n num
	if err := n.UnmarshalJSON([]byte("null")); err != nil || !math.IsNaN(float64(n)) {
		t.Errorf("null: %v, %v", n, err)
	}
}
