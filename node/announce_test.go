package node

import "testing"

func TestTableGrew(t *testing.T) {
	for _, tc := range []struct {
		then, now int
		want      bool
	}{
		{0, 0, false}, // a lone node never announced: nothing to redo
		{0, 1, false},
		{0, 2, true},
		{1, 1, false},
		{1, 2, true}, // the second node told only the first
		{3, 5, false},
		{3, 6, true},
		{16, 31, false},
		{16, 32, true},
		{20, 12, false}, // peers left: the records are where they were
	} {
		if got := tableGrew(tc.then, tc.now); got != tc.want {
			t.Errorf("tableGrew(%d, %d) = %v, want %v", tc.then, tc.now, got, tc.want)
		}
	}
}
