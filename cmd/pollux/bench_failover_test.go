package main

import "testing"

func TestBenchFailoverBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "failover", "--servers", "2"},
		{"bench", "failover", "--trials", "0"},
		{"bench", "failover", "--lease", "1s"},
		{"bench", "failover", "--batch", "0"},
		{"bench", "failover", "extra"},
		{"consensus-member", "--id", "s0", "--peers", "s0=127.0.0.1:1=127.0.0.1:2"}, // neither TLS nor --insecure
	} {
		if code := run(args); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
