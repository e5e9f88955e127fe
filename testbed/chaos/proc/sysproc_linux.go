package proc

import "syscall"

// sysProcAttr puts the child in a process group of its own, and has the
// kernel kill it should the harness die without closing its Group.
// Pdeathsig fires when the thread that forked the child ends, not the
// process: code that ends threads (a goroutine exiting while locked to
// its thread) would kill children forked on them. See netns.inNamespace.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
