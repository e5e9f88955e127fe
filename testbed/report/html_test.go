package report

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"pollux/testbed/sim"
)

// The page embeds every plot byte for byte, compares the policies with
// Pollux's reduction, lists every run, escapes names, and refers to no
// other file or host.
func TestWriteIndex(t *testing.T) {
	dir := t.TempDir()
	rs := results()
	rs = append(rs, &sim.Result{Policy: "pollux", Workload: "<w3>", Metrics: sim.Metrics{Jobs: 1, AvgJCT: 50}})
	files, err := WritePlots(dir, rs)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(rs)
	if err := WriteIndex(dir, Page{Title: "Policies <compared>", Note: "a note", Tables: SummaryTables(s), Plots: Plots(files)}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	imgs := regexp.MustCompile(`src="data:image/png;base64,([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(imgs) != len(files) {
		t.Fatalf("%d embedded images, want %d", len(imgs), len(files))
	}
	for i, m := range imgs {
		// The attribute's value, entities decoded (html/template writes
		// + as &#43;), is the data URL.
		got, err := base64.StdEncoding.DecodeString(html.UnescapeString(m[1]))
		want, _ := os.ReadFile(files[i])
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("image %d (%s) is not the plot's bytes (%v)", i, files[i], err)
		}
	}
	if strings.Count(page, "<figcaption>") != len(files) || !strings.Contains(page, "GPUs in use over time, workload w1") {
		t.Error("captions missing")
	}
	// Pollux first, with its reduction against Tiresias.
	red := 100 * s.Policies["pollux"].ReductionVs["tiresias"]
	rows := regexp.MustCompile(`(?s)<table id="policies">.*?</table>`).FindString(page)
	if !strings.Contains(rows, "<td>pollux</td>") || strings.Index(rows, "pollux") > strings.Index(rows, "tiresias") ||
		!strings.Contains(rows, fmt.Sprintf("<td>%.1f %%</td>", red)) {
		t.Errorf("policies table:\n%s", rows)
	}
	if runs := regexp.MustCompile(`(?s)<table id="runs">.*?</table>`).FindString(page); strings.Count(runs, "<tr>") != len(rs)+1 {
		t.Errorf("runs table has %d rows, want %d:\n%s", strings.Count(runs, "<tr>"), len(rs)+1, runs)
	}
	if strings.Contains(page, "<w3>") || !strings.Contains(page, "&lt;w3&gt;") || strings.Contains(page, "<compared>") {
		t.Error("names are not escaped")
	}
	if regexp.MustCompile(`(src|href)="(https?:|//|[a-z]+\.(png|css|js))`).MatchString(page) {
		t.Error("the page refers to another file or host")
	}
}
