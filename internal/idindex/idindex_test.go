package idindex

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	all := map[string]int{"0a1": 1, "0b2": 2, "0b3": 3, "c4": 4, "c4d": 5}
	tests := []struct {
		id        string
		want      string
		ambiguous []string // the candidates the error names
		missing   bool
	}{
		{id: "0a1", want: "0a1"},
		{id: "0a", want: "0a1"},
		{id: "c", ambiguous: []string{"c4", "c4d"}},
		{id: "c4", want: "c4"}, // a whole id wins over the longer one it begins
		{id: "0", ambiguous: []string{"0a1", "0b2", "0b3"}},
		{id: "0b", ambiguous: []string{"0b2", "0b3"}},
		{id: "0b3", want: "0b3"},
		{id: "1", missing: true},
		{id: "0a12", missing: true},
		{id: "", missing: true},
	}
	for _, tt := range tests {
		id, v, err := Find(maps.All(all), tt.id)
		switch {
		case tt.missing:
			if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrAmbiguous) {
				t.Errorf("Find(%q) = %q, %v; want not found", tt.id, id, err)
			}
		case tt.ambiguous != nil:
			var amb *AmbiguousError
			if !errors.As(err, &amb) || !errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrNotFound) {
				t.Errorf("Find(%q) = %q, %v; want ambiguous", tt.id, id, err)
				continue
			}
			if got := strings.Join(amb.IDs, ","); got != strings.Join(tt.ambiguous, ",") {
				t.Errorf("Find(%q) candidates %s, want %v", tt.id, got, tt.ambiguous)
			}
			for _, c := range tt.ambiguous {
				if !strings.Contains(err.Error(), c) {
					t.Errorf("Find(%q): %q does not name %s", tt.id, err, c)
				}
			}
		default:
			if err != nil || id != tt.want || v != all[tt.want] {
				t.Errorf("Find(%q) = %q, %d, %v; want %q", tt.id, id, v, err, tt.want)
			}
		}
	}
}

func TestAmbiguousErrorCapsTheList(t *testing.T) {
	var ids []string
	for _, c := range "0123456789abcdef" {
		ids = append(ids, "f"+string(c))
	}
	msg := (&AmbiguousError{Prefix: "f", IDs: ids}).Error()
	if !strings.Contains(msg, "16 ids") || !strings.HasSuffix(msg, "f6, f7 and 8 more") {
		t.Errorf("message %q", msg)
	}
	if strings.Contains(msg, "f8") {
		t.Errorf("message %q names more than %d ids", msg, listed)
	}
}

func TestSlice(t *testing.T) {
	type item struct{ ID string }
	items := []item{{"aa"}, {"ab"}, {"b"}}
	_, it, err := Find(Slice(items, func(i *item) string { return i.ID }), "b")
	if err != nil || it != &items[2] {
		t.Fatalf("Find in a slice: %v, %v", it, err)
	}
	if _, _, err := Find(Slice(items, func(i *item) string { return i.ID }), "a"); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Find(a) in a slice: %v, want ambiguous", err)
	}
}
