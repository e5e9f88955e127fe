package logbuf

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestLinesFromConcurrentWriters(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				fmt.Fprintf(&b, "writer=%d line=%d\n", w, i)
			}
		}()
	}
	wg.Wait()
	if got := len(b.Lines()); got != 200 {
		t.Fatalf("Lines() = %d lines, want 200", got)
	}
	got := b.Lines("writer=2", "line=7")
	want := []string{"writer=2 line=7"}
	if !slices.Equal(got, want) {
		t.Fatalf(`Lines("writer=2", "line=7") = %q, want %q`, got, want)
	}
	if got := b.Lines("writer=9"); got != nil {
		t.Fatalf("Lines of an absent writer = %q, want none", got)
	}
}
