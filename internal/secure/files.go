package secure

import (
	"fmt"
	"log/slog"
	"os"
)

// PrivateDir makes dir (and its missing parents) a directory only its
// owner may enter, mode 0700, tightening an existing one: a data
// directory holds the Raft log and snapshots (with the report key) or an
// agent's fencing state. A change of mode is logged.
func PrivateDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("secure: data directory: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("secure: data directory: %w", err)
	}
	if perm := st.Mode().Perm(); perm != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("secure: data directory %s (mode %04o): %w", dir, perm, err)
		}
		log.Warn("data directory was open to other users: mode set to 0700", "dir", dir, "was", fmt.Sprintf("%04o", perm))
	}
	return nil
}
