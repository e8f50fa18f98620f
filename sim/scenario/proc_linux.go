package scenario

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the process if the runner dies, so a
// crashed run leaves no nodes behind.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
