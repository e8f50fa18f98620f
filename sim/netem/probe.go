package netem

import (
	"fmt"
	"os"
	"sync"
)

var netemProbe struct {
	sync.Mutex
	done bool
	has  bool
}

// HasNetem tells whether the kernel has the netem qdisc: it makes a
// throwaway namespace, tries to put netem on its lo, and removes the
// namespace. The answer is remembered for the life of the process. Without
// root it is false (and not remembered).
func HasNetem() bool {
	netemProbe.Lock()
	defer netemProbe.Unlock()
	if netemProbe.done {
		return netemProbe.has
	}
	if os.Geteuid() != 0 {
		return false
	}
	name := fmt.Sprintf("%sprobe", runPrefix(runSeq.Add(1)))
	claim(name)
	defer release(name)
	if err := addNetns(name); err != nil {
		return false
	}
	defer delNetns(name)
	netemProbe.has = batch("tc", name, "qdisc add dev lo root netem delay 1ms\n") == nil
	netemProbe.done = true
	return netemProbe.has
}
