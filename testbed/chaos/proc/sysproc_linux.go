package proc

import "syscall"

// sysProcAttr puts the child in a process group of its own, and has the
// kernel kill it should the harness die without closing its Group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
