// Package tracing_test checks berth's OpenTelemetry traces end to end: a
// real daemon exports over OTLP to a receiver in the test process, and
// the spans of its CRI calls continue the trace context the test sends
// as the kubelet does (a traceparent in the gRPC metadata).
//
// Needs root and $BERTH_TEST_REGISTRY (hack/registry); skips without.
package tracing_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
