package fedlink

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pollux/cluster/federation"
	"pollux/cluster/pki"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pki.WriteCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	write := func(s string) string {
		p := filepath.Join(dir, "fed.json")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `{"quota": {"nominal_quota": 8, "lending_limit": 4, "borrowing_limit": 8},
  "peers": [{"name": "lab-b", "addresses": ["127.0.0.1:7400"], "ca_file": "pollux-ca.pem"}]}`
	fed, err := Load(write(good), "lab-a")
	if err != nil {
		t.Fatal(err)
	}
	if fed.Settings != federation.DefaultSettings() || len(fed.Peers) != 1 || fed.Peers[0].CAs[0] != pki.Fingerprint(ca.Cert) {
		t.Fatalf("loaded %+v", fed)
	}
	if _, ok := fed.Pools("lab-b"); !ok {
		t.Error("no pool for lab-b")
	}
	// Terms given in part keep the defaults of the others.
	want := federation.DefaultSettings()
	want.TTL, want.MinHold = 30, 0
	part, err := Load(write(strings.Replace(good, `"peers"`, `"terms": {"lease_ttl_s": 30, "min_hold_s": 0}, "peers"`, 1)), "lab-a")
	if err != nil || part.Settings != want {
		t.Errorf("terms in part: %v, %+v, want %+v", err, part, want)
	}
	rooted, err := Load(write(strings.Replace(good, `"ca_file"`, `"checkpoint_root": "/shared/lab-b/", "ca_file"`, 1)), "lab-a")
	if err != nil || rooted.Peers[0].CheckpointRoot != "/shared/lab-b" {
		t.Errorf("a peer's checkpoint root: %v, %v", err, rooted)
	}
	bad := map[string]string{
		"syntax":             "{\n  \"quota\": ,\n}",
		"unknown field":      `{"quota": {}, "peers": [], "extra": 1}`,
		"no peers":           `{"quota": {"nominal_quota": 1}, "peers": []}`,
		"itself":             strings.Replace(good, `"lab-b"`, `"lab-a"`, 1),
		"lending > nominal":  strings.Replace(good, `"lending_limit": 4`, `"lending_limit": 9`, 1),
		"missing CA file":    strings.Replace(good, "pollux-ca.pem", "nope.pem", 1),
		"not a CA":           strings.Replace(good, "pollux-ca.pem", "pollux-ca-key.pem", 1),
		"bad address":        strings.Replace(good, "127.0.0.1:7400", "nowhere", 1),
		"bad terms":          strings.Replace(good, `"peers"`, `"terms": {"lease_ttl_s": -1}, "peers"`, 1),
		"bad hold":           strings.Replace(good, `"peers"`, `"terms": {"min_hold_s": -1}, "peers"`, 1),
		"peer listed twice":  strings.Replace(good, `}]}`, `}, {"name": "lab-b", "addresses": ["127.0.0.1:1"], "ca_file": "pollux-ca.pem"}]}`, 1),
		"trailing":           good + " {}",
		"bad peer name":      strings.Replace(good, `"lab-b"`, `"lab b"`, 1),
		"no address of peer": strings.Replace(good, `["127.0.0.1:7400"]`, `[]`, 1),
		"bad gossip address": strings.Replace(good, `"ca_file"`, `"gossip": ["nowhere"], "ca_file"`, 1),
		"relative ckpt root": strings.Replace(good, `"ca_file"`, `"checkpoint_root": "ckpt", "ca_file"`, 1),
		"ckpt root /":        strings.Replace(good, `"ca_file"`, `"checkpoint_root": "/", "ca_file"`, 1),
	}
	for name, body := range bad {
		if _, err := Load(write(body), "lab-a"); !errors.Is(err, ErrBadFile) || !strings.Contains(err.Error(), "fed.json") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Load(write(bad["syntax"]), "lab-a"); err == nil || !strings.Contains(err.Error(), "2:") {
		t.Errorf("syntax error without its line: %v", err)
	}
}

func FuzzDecodeBid(f *testing.F) {
	m := BidMessage{From: "lab-a", At: 10, Curve: []float64{3, 2, 1}, Used: map[string]int{"n0": 2},
		Lab: federation.Lab{Name: "lab-a", CA: "fp", Nodes: []federation.Node{{ID: "n0", GPUs: 4}}, Quota: federation.Quota{Nominal: 4, LendingLimit: 4, BorrowingLimit: 4},
			Peers: []federation.Peer{{Name: "lab-b", CAs: []string{"fq"}}}},
		Leases: []federation.Lease{{ID: "l1", Lender: "lab-a", Borrower: "lab-b", Nodes: []federation.NodeGPUs{{Node: "n0", GPUs: 2}}, Granted: 1, Expires: 61, TTL: 60}}}
	b, _ := json.Marshal(m)
	f.Add(b)
	m.Hosts = map[string]string{"n0": "gpu-0.lab-a.example"}
	b, _ = json.Marshal(m)
	f.Add(b)
	f.Add([]byte(`{"from":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeBid(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeBid(again); err != nil {
			t.Fatalf("a decoded bid does not decode again: %v", err)
		}
	})
}

// A bid's hosts are of the lab's nodes, each an IP address or a DNS
// name; anything else refuses the bid.
func TestDecodeBidHosts(t *testing.T) {
	m := BidMessage{From: "lab-a", At: 10, Lab: federation.Lab{Name: "lab-a", CA: "fp", Nodes: []federation.Node{{ID: "n0", GPUs: 4}},
		Quota: federation.Quota{Nominal: 4, LendingLimit: 4}, Peers: []federation.Peer{{Name: "lab-b", CAs: []string{"fq"}}}}}
	for hosts, ok := range map[string]bool{
		`{"n0": "10.0.0.1"}`: true, `{"n0": "fd00::1"}`: true, `{"n0": "gpu-0.lab-a.example"}`: true,
		`{"n9": "10.0.0.1"}`: false, `{"n0": ""}`: false, `{"n0": "gpu 0"}`: false, `{"n0": "-gpu"}`: false,
		`{"n0": "a..b"}`: false, `{"n0": "10.0.0.1:7000"}`: false, `{"n0": "` + strings.Repeat("a", 64) + `"}`: false,
	} {
		b, _ := json.Marshal(m)
		b = append(b[:len(b)-1], []byte(`,"hosts":`+hosts+`}`)...)
		if _, err := DecodeBid(b); (err == nil) != ok || err != nil && !errors.Is(err, ErrBadMessage) {
			t.Errorf("hosts %s: %v", hosts, err)
		}
	}
}
