package server

import "testing"

func TestFitExecOutput(t *testing.T) {
	for _, c := range []struct{ out, err, max, wantOut, wantErr int }{
		{10, 10, 30, 10, 10},
		{30, 0, 20, 20, 0},
		{30, 10, 20, 10, 10},
		{16 << 20, 16 << 20, 16 << 20, 8 << 20, 8 << 20},
		{16 << 20, 1, 16<<20 - 4096, 16<<20 - 4097, 1},
	} {
		o, e := fitExecOutput(make([]byte, c.out), make([]byte, c.err), c.max)
		if len(o) != c.wantOut || len(e) != c.wantErr {
			t.Errorf("fit(%d, %d, %d) = %d, %d; want %d, %d", c.out, c.err, c.max, len(o), len(e), c.wantOut, c.wantErr)
		}
	}
}
