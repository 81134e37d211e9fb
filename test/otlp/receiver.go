// Package otlp is an OTLP trace receiver for tests: the collector's
// TraceService over gRPC on a loopback port, keeping every span it is
// sent, from berth and from the kubelet alike.
package otlp

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// Span is one received span, its ids in hex as traceparent writes them.
type Span struct {
	Service               string // the resource's service.name
	TraceID, ID, ParentID string
	Name                  string
	Attrs                 map[string]string
	Start, End            time.Time
	Error                 string // status message of a failed span
}

func (s Span) String() string {
	return fmt.Sprintf("%s %q trace %s span %s parent %s %v", s.Service, s.Name, s.TraceID, s.ID, s.ParentID, s.Attrs)
}

// Receiver collects the spans exported to Addr.
type Receiver struct {
	collectorpb.UnimplementedTraceServiceServer
	Addr string

	mu    sync.Mutex
	spans []Span
}

// Start serves a receiver on a free loopback port until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Addr: l.Addr().String()}
	g := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(g, r)
	go g.Serve(l)
	t.Cleanup(g.Stop)
	return r
}

// Export is the collector's RPC.
func (r *Receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{
					Service: service,
					TraceID: hex.EncodeToString(s.GetTraceId()), ID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()),
					Name:     s.GetName(), Attrs: attrs(s.GetAttributes()),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Error: s.GetStatus().GetMessage(),
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		default:
			// Numbers and booleans: their text is enough for a test.
			m[kv.GetKey()] = strings.TrimSpace(fmt.Sprint(v.GetValue()))
		}
	}
	return m
}

// Spans returns every span received so far, in start order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]Span(nil), r.spans...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// Trace returns the spans received of one trace.
func (r *Receiver) Trace(traceID string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Wait polls until cond holds for the spans received, or fails the test
// after timeout listing them.
func (r *Receiver) Wait(t testing.TB, timeout time.Duration, what string, cond func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans := r.Spans()
		if cond(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			lines := make([]string, len(spans))
			for i, s := range spans {
				lines[i] = s.String()
			}
			t.Fatalf("no %s after %s; %d spans received:\n%s", what, timeout, len(spans), strings.Join(lines, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Find returns the first span of spans named name with parent (any
// parent if parent is "").
func Find(spans []Span, name, parent string) (Span, bool) {
	for _, s := range spans {
		if s.Name == name && (parent == "" || s.ParentID == parent) {
			return s, true
		}
	}
	return Span{}, false
}
