// Package deploy holds no code: its directory keeps the files that put
// Pollux on real machines (systemd units, Prometheus alert rules;
// docs/deploy.md walks through them), and its tests check them with the
// tools that read them.
package deploy
