// Package report turns simulated runs into what `pollux sim` shows and
// writes: per-run and per-policy summaries (with Pollux's reduction against
// each baseline), a per-job CSV, and PNG plots (JCT CDF per policy; GPUs in
// use and mean batch size over time).
package report
