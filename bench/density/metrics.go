package density

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// metrics is one scrape of a Prometheus text endpoint, reduced to what the
// benchmark reads: histograms by base name (summed over labels other than
// le) and every other sample by its name and labels as exposed.
type metrics struct {
	hists   map[string]*histogram
	series  map[string]*histogram // by name{labels but le}, labels sorted
	samples map[string]float64
}

// histogram holds cumulative bucket counts, as exposed.
type histogram struct {
	buckets []bucket // by le, ascending, the last +Inf
	sum     float64
	count   float64
}

type bucket struct {
	le    float64
	count float64
}

// parseMetrics reads the text exposition format (the kubelet's /metrics).
// Comments, timestamps and malformed lines are skipped; a histogram's
// series with other labels (none of the ones read here have them) are
// added together.
func parseMetrics(r io.Reader) (*metrics, error) {
	m := &metrics{hists: map[string]*histogram{}, series: map[string]*histogram{}, samples: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			continue
		}
		switch {
		case strings.HasSuffix(name, "_bucket") && labels["le"] != "":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err != nil {
				continue
			}
			base := strings.TrimSuffix(name, "_bucket")
			m.hist(base).add(le, value)
			m.seriesOf(base, labels).add(le, value)
		case strings.HasSuffix(name, "_sum") && m.isHist(name, "_sum"):
			base := strings.TrimSuffix(name, "_sum")
			m.hist(base).sum += value
			m.seriesOf(base, labels).sum += value
		case strings.HasSuffix(name, "_count") && m.isHist(name, "_count"):
			base := strings.TrimSuffix(name, "_count")
			m.hist(base).count += value
			m.seriesOf(base, labels).count += value
		default:
			m.samples[sampleKey(line)] += value
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// A histogram's _sum and _count come after its buckets in the format;
	// one that got no buckets was not a histogram.
	for _, hs := range []map[string]*histogram{m.hists, m.series} {
		for k, h := range hs {
			if len(h.buckets) == 0 {
				delete(hs, k)
			}
		}
	}
	return m, nil
}

func (m *metrics) hist(name string) *histogram {
	h := m.hists[name]
	if h == nil {
		h = &histogram{}
		m.hists[name] = h
	}
	return h
}

// seriesOf is the histogram of one label set (le left out).
func (m *metrics) seriesOf(name string, labels map[string]string) *histogram {
	key := seriesKey(name, labels)
	h := m.series[key]
	if h == nil {
		h = &histogram{}
		m.series[key] = h
	}
	return h
}

// seriesKey is name{k="v",...} with the labels but le, sorted by name.
func seriesKey(name string, labels map[string]string) string {
	var ks []string
	for k := range labels {
		if k != "le" {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return name
	}
	sort.Strings(ks)
	var b strings.Builder
	b.WriteString(name + "{")
	for i, k := range ks {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

func (h *histogram) add(le, count float64) {
	i := sort.Search(len(h.buckets), func(i int) bool { return h.buckets[i].le >= le })
	if i < len(h.buckets) && h.buckets[i].le == le {
		h.buckets[i].count += count
		return
	}
	h.buckets = append(h.buckets, bucket{})
	copy(h.buckets[i+1:], h.buckets[i:])
	h.buckets[i] = bucket{le, count}
}

// isHist tells whether name (NAME_sum or NAME_count) belongs to a histogram
// already seen; if not, the line is an ordinary sample.
func (m *metrics) isHist(name, suffix string) bool {
	_, ok := m.hists[strings.TrimSuffix(name, suffix)]
	return ok
}

// sampleKey is a sample's name and label set as written, without value
// and timestamp.
func sampleKey(line string) string {
	if i := strings.LastIndex(line, "}"); i >= 0 {
		return line[:i+1]
	}
	name, _, _ := strings.Cut(line, " ")
	return name
}

// parseSample splits `name{k="v",...} value [timestamp]`.
func parseSample(line string) (string, map[string]string, float64, error) {
	labels := map[string]string{}
	var name, rest string
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return "", nil, 0, fmt.Errorf("no value: %q", line)
	} else if line[i] == ' ' {
		name, rest = line[:i], line[i:]
	} else {
		name = line[:i]
		s := line[i+1:]
		for {
			s = strings.TrimLeft(s, " ,")
			if strings.HasPrefix(s, "}") {
				rest = s[1:]
				break
			}
			k, v, ok := strings.Cut(s, "=")
			if !ok || !strings.HasPrefix(v, `"`) {
				return "", nil, 0, fmt.Errorf("bad labels: %q", line)
			}
			val, n, err := unquote(v)
			if err != nil {
				return "", nil, 0, fmt.Errorf("%w: %q", err, line)
			}
			labels[strings.TrimSpace(k)] = val
			s = v[n:]
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, fmt.Errorf("no value: %q", line)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("value: %w", err)
	}
	return name, labels, v, nil
}

// unquote reads a label value at the start of s (opening quote included)
// and returns it with the number of bytes it took.
func unquote(s string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 >= len(s) {
				return "", 0, fmt.Errorf("unterminated label value")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), i + 1, nil
		default:
			b.WriteByte(s[i])
		}
	}
	return "", 0, fmt.Errorf("unterminated label value")
}

// sub returns h minus an earlier scrape of the same histogram (nil: h).
func (h *histogram) sub(before *histogram) *histogram {
	out := &histogram{sum: h.sum, count: h.count, buckets: append([]bucket(nil), h.buckets...)}
	if before == nil {
		return out
	}
	out.sum -= before.sum
	out.count -= before.count
	for i := range out.buckets {
		for _, b := range before.buckets {
			if b.le == out.buckets[i].le {
				out.buckets[i].count -= b.count
			}
		}
	}
	return out
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile
// does: linear inside the bucket the rank falls in, the lowest bucket
// starting at 0, and the highest finite bound when the rank is in +Inf.
// NaN without observations.
func (h *histogram) quantile(q float64) float64 {
	if h == nil || len(h.buckets) == 0 {
		return math.NaN()
	}
	total := h.buckets[len(h.buckets)-1].count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	prevLe, prevCount := 0.0, 0.0
	for i, b := range h.buckets {
		if b.count >= rank && b.count > prevCount {
			if math.IsInf(b.le, 1) {
				if i == 0 {
					return math.NaN()
				}
				return h.buckets[i-1].le
			}
			if i == 0 && b.le <= 0 {
				return b.le
			}
			return prevLe + (b.le-prevLe)*(rank-prevCount)/(b.count-prevCount)
		}
		prevLe, prevCount = b.le, b.count
	}
	return prevLe
}
