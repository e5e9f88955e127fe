package fedsim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pollux/cluster/federation"
)

// lab is one lab of a federation file in the tests below.
func lab(name, ca, peers string) string {
	return `{"name": "` + name + `", "ca": "` + ca + `", "nodes": 2, "gpus_per_node": 4, "peers": [` + peers + `],
	  "workload": {"generate": {"jobs": 2, "window_s": 60, "seed": 1}}}`
}

const (
	labA = `{"name": "lab-a", "ca": "ca-a", "nodes": 2, "gpus_per_node": 4, "quota": {"lending_limit": 4, "borrowing_limit": 4},
	  "peers": [{"name": "lab-b", "ca": "ca-b"}], "workload": {"generate": {"jobs": 2, "window_s": 60, "seed": 1}}}`
	labB = `{"name": "lab-b", "ca": "ca-b", "nodes": 2, "gpus_per_node": 4,
	  "peers": [{"name": "lab-a", "ca": "ca-a"}], "workload": {"generate": {"jobs": 2, "window_s": 60, "seed": 2}}}`
)

func file(parts ...string) string {
	return `{"labs": [` + labA + `, ` + labB + `]` + strings.Join(parts, "") + `}`
}

// Every bad federation file is refused with its sentinel error and a
// message naming what is wrong (and where, for syntax).
func TestDecodeRefuses(t *testing.T) {
	tests := []struct {
		name string
		data string
		want error
		msg  string
	}{
		{"peer with an unknown CA", `{"labs": [` + labA + `, ` + lab("lab-b", "ca-b", `{"name": "lab-a", "ca": "ca-evil"}`) + `]}`, federation.ErrUnknownCA, "lab-a presents CA ca-a"},
		{"peer that is not a lab", `{"labs": [` + labA + `, ` + lab("lab-b", "ca-b", `{"name": "lab-z", "ca": "ca-z"}`) + `]}`, federation.ErrUnknownPeer, "lab-z"},
		{"lease beyond the lending limit", file(`, "leases": [{"lender": "lab-a", "borrower": "lab-b", "nodes": [{"node": "node-0", "gpus": 4}, {"node": "node-1", "gpus": 4}]}]`), federation.ErrLendingLimit, "lending limit is 4"},
		{"lease of nodes the lender does not own", file(`, "leases": [{"lender": "lab-a", "borrower": "lab-b", "nodes": [{"node": "node-5", "gpus": 4}]}]`), federation.ErrNotOwner, "node-5"},
		{"lease beyond the borrowing limit", file(`, "leases": [{"lender": "lab-b", "borrower": "lab-a", "nodes": [{"node": "node-0", "gpus": 4}, {"node": "node-1", "gpus": 4}]}]`), federation.ErrBorrowingLimit, "borrowing limit is 4"},
		{"lease with a lab outside the federation", file(`, "leases": [{"lender": "lab-a", "borrower": "lab-q", "nodes": [{"node": "node-0", "gpus": 4}]}]`), federation.ErrUnknownPeer, "lab-q"},
		{"malformed injected command", file(`, "inject": [{"command": {"op": "steal", "from": "lab-a", "lease": "x", "at": 1}}]`), federation.ErrBadCommand, "steal"},
		{"injection with command and order", file(`, "inject": [{"command": {"op": "expire", "from": "lab-a", "at": 1}, "order": {"lender": "lab-a"}}]`), ErrBadFile, "exactly one"},
		{"order to a lab outside the federation", file(`, "inject": [{"order": {"lender": "lab-q", "borrower": "lab-a", "node": "node-0", "gpus": 1, "at": 1}}]`), ErrBadFile, "lab-q"},
		{"syntax error", "{\n  \"labs\": [\n    {\"name\": }\n]}", ErrBadFile, ":3:"},
		{"unknown field", file(`, "lease_ttl": 5`), ErrBadFile, "lease_ttl"},
		{"wrong type", `{"labs": 3}`, ErrBadFile, ":1:"},
		{"trailing data", file() + ` {}`, ErrBadFile, "trailing"},
		{"one lab", `{"labs": [` + lab("lab-a", "ca-a", "") + `]}`, ErrBadFile, "1 labs"},
		{"lab twice", `{"labs": [` + labA + `, ` + labA + `]}`, ErrBadFile, "twice"},
		{"bad lab name", `{"labs": [` + labA + `, ` + lab("lab b", "ca-b", "") + `]}`, ErrBadFile, "lab b"},
		{"node sizes differ", `{"labs": [` + labA + `, ` + strings.Replace(labB, `"gpus_per_node": 4`, `"gpus_per_node": 8`, 1) + `]}`, ErrBadFile, "one node size"},
		{"lab without nodes", `{"labs": [` + labA + `, ` + strings.Replace(labB, `"nodes": 2`, `"nodes": 0`, 1) + `]}`, ErrBadFile, "0 nodes"},
		{"lending limit above nominal", `{"labs": [` + strings.Replace(labA, `"lending_limit": 4`, `"lending_limit": 9`, 1) + `, ` + labB + `]}`, federation.ErrBadConfig, "lending limit 9"},
		{"owner weight below one", file(`, "terms": {"owner_weight": 0.5}`), federation.ErrBadConfig, "owner weight"},
		{"interval not whole", file(`, "interval_s": 1.5`), ErrBadFile, "interval_s"},
		{"negative checkpoint", file(`, "checkpoint_s": -1`), ErrBadFile, "checkpoint_s"},
		{"workload without source", `{"labs": [` + labA + `, ` + strings.Replace(labB, `"generate": {"jobs": 2, "window_s": 60, "seed": 2}`, `"offset_s": 5`, 1) + `]}`, ErrBadFile, "file or a generate"},
		{"sample beyond every", `{"labs": [` + labA + `, ` + strings.Replace(labB, `"seed": 2}`, `"seed": 2}, "every": 2, "first": 2`, 1) + `]}`, ErrBadFile, "first 2"},
		{"outage of a lab outside the federation", file(`, "outages": [{"lab": "lab-q", "at_s": 10, "for_s": 10}]`), ErrBadFile, "lab-q"},
		{"outage without a duration", file(`, "outages": [{"lab": "lab-a", "at_s": 10}]`), ErrBadFile, "duration"},
		{"overlapping outages", file(`, "outages": [{"lab": "lab-a", "at_s": 10, "for_s": 100}, {"lab": "lab-a", "at_s": 50, "for_s": 10}]`), ErrBadFile, "overlap"},
		{"negative offset", `{"labs": [` + labA + `, ` + strings.Replace(labB, `"seed": 2}`, `"seed": 2}, "offset_s": -5`, 1) + `]}`, ErrBadFile, "offset_s"},
	}
	if _, err := Decode([]byte(file()), "good"); err != nil {
		t.Fatalf("the base file: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.data), "fed.json")
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), "fed.json") {
				t.Fatalf("got %v, want %v naming fed.json and %q", err, tt.want, tt.msg)
			}
		})
	}
	big := make([]byte, MaxFileBytes+1)
	if _, err := Decode(big, "big.json"); !errors.Is(err, ErrBadFile) {
		t.Fatalf("oversized file: %v", err)
	}
}

// FuzzDecode: no input panics the decoder; what decodes yields ledgers
// and checks its labs' trust both ways it declared.
func FuzzDecode(f *testing.F) {
	f.Add(Example())
	for _, name := range []string{"small.json", "inject.json", "outage.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(file()))
	f.Add([]byte(`{"labs":[{"name":"a","ca":"x","nodes":1,"gpus_per_node":1,"workload":{"file":"w.csv"}},{"name":"b","ca":"y","nodes":1,"gpus_per_node":1,"workload":{"file":"w.csv"}}],"terms":{"power_mean":-11}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fed, err := Decode(data, "fuzz.json")
		if err != nil {
			return
		}
		if _, err := fed.Ledgers(); err != nil {
			t.Fatalf("decoded federation without ledgers: %v", err)
		}
		for _, l := range fed.Labs {
			if err := l.Validate(); err != nil {
				t.Fatalf("decoded lab %s does not validate: %v", l.Name, err)
			}
			for _, p := range l.Peers {
				if peer := fed.lab(p.Name); peer == nil || l.Trusts(p.Name, peer.CA) != nil {
					t.Fatalf("lab %s trusts %s, which does not present its CA", l.Name, p.Name)
				}
			}
		}
	})
}
