package sandbox

import (
	"errors"
	"testing"
)

func TestNamesRetryRule(t *testing.T) {
	n := newNames()
	r, mine := n.claim("a")
	if !mine {
		t.Fatal("first claim not the caller's")
	}
	r2, mine2 := n.claim("a")
	if mine2 || r2 != r {
		t.Fatal("second claim of a busy name must wait on the first")
	}
	select {
	case <-r2.done:
		t.Fatal("done before finish")
	default:
	}
	n.finish("a", r, "pod1", nil)
	<-r2.done
	if r2.id != "pod1" || r2.err != nil {
		t.Fatalf("waiter got %q, %v", r2.id, r2.err)
	}
	if r3, mine := n.claim("a"); mine || r3.id != "pod1" {
		t.Fatal("claim after a successful finish must return the pod")
	}
	n.release("a", "other")
	if _, mine := n.claim("a"); mine {
		t.Fatal("release by another id freed the name")
	}
	n.release("a", "pod1")
	r4, mine := n.claim("a")
	if !mine {
		t.Fatal("name not free after release")
	}
	n.finish("a", r4, "", errors.New("boom"))
	if r4.err == nil {
		t.Fatal("error not recorded")
	}
	if _, mine := n.claim("a"); !mine {
		t.Fatal("name not free after a failed run")
	}
	n.restore("b", "pod2")
	if r, mine := n.claim("b"); mine || r.id != "pod2" {
		t.Fatal("restored name not held")
	}
}
