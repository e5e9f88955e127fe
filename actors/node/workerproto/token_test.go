package workerproto

import (
	"strings"
	"testing"
)

func TestReportTokens(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	tok := ReportToken(key, "j", 3, 0)
	if len(tok) != 43 || tok != ReportToken(key, "j", 3, 0) {
		t.Fatalf("token %q: want 43 characters, the same every time", tok)
	}
	// Every input changes it.
	others := map[string]string{
		"rank 1":        ReportToken(key, "j", 3, 1),
		"incarnation 4": ReportToken(key, "j", 3+1, 0),
		"job k":         ReportToken(key, "k", 3, 0),
		"other key":     ReportToken([]byte("another key"), "j", 3, 0),
		// The fields are separated: "j1"+"3" is not "j"+"13".
		"job j1 inc 3": ReportToken(key, "j1", 3, 0),
	}
	others["job j inc 13"] = ReportToken(key, "j", 13, 0)
	seen := map[string]string{tok: "base"}
	for name, o := range others {
		if prev, ok := seen[o]; ok {
			t.Errorf("%s has the token of %s", name, prev)
		}
		seen[o] = name
	}
	if !SameToken(tok, tok) || SameToken(tok, others["rank 1"]) || SameToken(tok, "") || SameToken("", "") {
		t.Error("SameToken")
	}
	if SameToken(tok, strings.ToUpper(tok)) || SameToken(tok, tok[:42]) {
		t.Error("SameToken accepts a changed token")
	}
}

func TestReportTokenRoundTrip(t *testing.T) {
	r := Report{Job: "j", Incarnation: 1, StepTime: 1, LocalBatch: 1, Token: ReportToken([]byte("k"), "j", 1, 0), Done: true}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || got != r {
		t.Errorf("Decode(%s) = %+v, %v", b, got, err)
	}
	r.Token = ""
	if b, _ := Encode(r); strings.Contains(string(b), "token") {
		t.Errorf("a report without a token encodes one: %s", b)
	}
}
