package client

import (
	"strconv"
	"strings"
	"testing"

	"pollux/actors/server/api"
)

// FuzzReadEvents feeds the event stream parser arbitrary streams: it
// never panics, and every event it delivers has the id of its sequence
// number.
func FuzzReadEvents(f *testing.F) {
	f.Add("id: 1\nevent: submitted\ndata: {\"seq\":1,\"type\":\"submitted\",\"job\":\"j\",\"reason\":\"r\"}\n\n: keep-alive\n\n")
	f.Add("id: 2\ndata: {\"seq\":2}\n\nid: 3\ndata: {\"seq\":\ndata: 3}\n\n")
	f.Add("id: 9\ndata: {\"seq\":8}\n\n")
	f.Add("data: {\n\n")
	f.Add(strings.Repeat("x", maxEventLine+1))
	f.Fuzz(func(t *testing.T, s string) {
		_ = readEvents(strings.NewReader(s), func(ev api.Event) error {
			if ev.Seq == 0 && !strings.Contains(s, "id: 0") && !strings.Contains(s, "id:0") {
				t.Fatalf("event of sequence number 0 without id 0 in %q", s)
			}
			if !strings.Contains(s, strconv.FormatUint(ev.Seq, 10)) {
				t.Fatalf("event %d not in the stream %q", ev.Seq, s)
			}
			return nil
		})
	})
}
