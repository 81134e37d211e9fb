package container

import (
	"reflect"
	"syscall"
	"testing"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/reserve"
)

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want syscall.Signal
		bad  bool
	}{
		{"SIGTERM", syscall.SIGTERM, false},
		{"quit", syscall.SIGQUIT, false},
		{"9", syscall.SIGKILL, false},
		{"SIGRTMIN+3", 0, true},
		{"NOPE", 0, true},
		{"0", 0, true},
	} {
		got, err := parseSignal(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseSignal(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestParseImageConfig(t *testing.T) {
	raw := []byte(`{"architecture":"amd64","config":{"User":"1000:1000","Env":["PATH=/bin"],"Entrypoint":["/ep"],"Cmd":["a"],"WorkingDir":"/w","StopSignal":"SIGQUIT"}}`)
	got, err := parseImageConfig(raw)
	want := spec.ImageConfig{User: "1000:1000", Env: []string{"PATH=/bin"}, Entrypoint: []string{"/ep"}, Cmd: []string{"a"}, WorkingDir: "/w", StopSignal: "SIGQUIT"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if _, err := parseImageConfig([]byte("{")); err == nil {
		t.Fatal("garbage accepted")
	}
	if got, err := parseImageConfig(nil); err != nil || !reflect.DeepEqual(got, spec.ImageConfig{}) {
		t.Fatalf("empty: %+v %v", got, err)
	}
}

func TestMatchLabels(t *testing.T) {
	labels := map[string]string{"a": "1", "b": "2"}
	for _, tc := range []struct {
		sel  map[string]string
		want bool
	}{
		{nil, true},
		{map[string]string{"a": "1"}, true},
		{map[string]string{"a": "1", "b": "2"}, true},
		{map[string]string{"a": "2"}, false},
		{map[string]string{"c": ""}, false},
	} {
		if got := matchLabels(labels, tc.sel); got != tc.want {
			t.Errorf("matchLabels(%v) = %v", tc.sel, got)
		}
	}
}

func TestIsContainerID(t *testing.T) {
	if !isContainerID(reserve.NewID()) || isContainerID("abc") || isContainerID("sha256:"+reserve.NewID()[:57]) {
		t.Fatal("isContainerID")
	}
}
