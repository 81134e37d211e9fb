package main

import (
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC)
	for _, tc := range []struct {
		format, want string
		bad          bool
	}{
		{format: "%3t", want: "03:04:05.678"},
		{format: "%t", want: "03:04:05"},
		{format: "%6t", want: "03:04:05.678901"},
		{format: "at %1t, 100%%", want: "at 03:04:05.6, 100%"},
		{format: "%c", bad: true},
		{format: "%7t", bad: true},
		{format: "50%", bad: true},
	} {
		items, err := parse(tc.format)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: parsed, want an error", tc.format)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.format, err)
			continue
		}
		if got := format(items, now); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.format, got, tc.want)
		}
	}
}

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		argv   []string
		delay  int
		format string
		bad    bool
	}{
		{argv: []string{"-d0", "%3t"}, delay: 0, format: "%3t"},
		{argv: []string{"-d", "250", "%t"}, delay: 250, format: "%t"},
		{argv: []string{"%t"}, delay: 1000, format: "%t"},
		{argv: []string{"-dx", "%t"}, bad: true},
		{argv: []string{"-d0"}, bad: true},
		{argv: []string{"%t", "%t"}, bad: true},
	} {
		d, f, err := args(tc.argv)
		if tc.bad != (err != nil) || (!tc.bad && (d != tc.delay || f != tc.format)) {
			t.Errorf("%q: %d %q %v", tc.argv, d, f, err)
		}
	}
}
