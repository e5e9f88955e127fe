package fabric

import (
	"errors"
	"testing"
)

func TestLinks(t *testing.T) {
	const b = 1e9
	l, err := NewLinks(Config{NodeBandwidth: b, Oversubscription: 4}, []int{4, 4})
	if err != nil {
		t.Fatal(err)
	}
	join := func(key string, rack int) func() {
		t.Helper()
		leave, err := l.Join(key, rack)
		if err != nil {
			t.Fatal(err)
		}
		return leave
	}
	const bytes = 1e8
	// One job across the racks, alone, with one node in rack 0: its cap
	// is one node's 1 GB/s, which an uplink (4 nodes / 4) carries, so it
	// loses nothing.
	a0, a1 := join("a@1", 0), join("a@1", 1)
	join("a@1", 1)
	if n := l.Nodes("a@1"); n != 3 {
		t.Fatalf("nodes %d", n)
	}
	if alone, racks := l.Extra("a@1", bytes); racks != 2 || !near(alone, 0) {
		t.Fatalf("alone at its cap: extra %v over %d racks", alone, racks)
	}
	// A second job across the same uplinks halves the rate: each pays.
	join("b@1", 0)
	join("b@1", 1)
	shared, _ := l.Extra("a@1", bytes)
	if !near(shared, bytes/(b/2)-bytes/b) {
		t.Fatalf("shared extra %v, want %v", shared, bytes/(b/2)-bytes/b)
	}
	// A job within one rack adds nothing and takes nothing.
	join("c@1", 0)
	join("c@1", 0)
	if x, r := l.Extra("c@1", bytes); x != 0 || r != 1 {
		t.Fatalf("in-rack job: extra %v over %d racks", x, r)
	}
	if x, _ := l.Extra("a@1", bytes); !near(x, shared) {
		t.Fatalf("an in-rack job changed a's extra to %v", x)
	}
	// Leaving rack 0 leaves a within one rack; leave is idempotent.
	a0()
	a0()
	if x, r := l.Extra("a@1", bytes); x != 0 || r != 1 {
		t.Fatalf("after leaving: extra %v over %d racks", x, r)
	}
	a1()
	if n := l.Nodes("a@1"); n != 1 {
		t.Fatalf("nodes after two leaves %d", n)
	}
	if _, err := l.Join("d@1", 2); !errors.Is(err, ErrConfig) {
		t.Fatalf("joined a rack the network lacks: %v", err)
	}
}
