package netem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps its named namespaces (bind mounts of
// nsfs files).
const netnsDir = "/run/netns"

// prefix starts the name of every namespace this package makes:
// psim-<pid>-<run>-<host>, psim-<pid>-<run>-hub, psim-<pid>-<run>-probe.
const prefix = "psim-"

// runSeq numbers the runs (and netem probes) of this process, so that two
// Nets of one process do not collide.
var runSeq atomic.Int64

// live holds the names of the namespaces that runs of this process own and
// have not removed yet; Cleanup leaves them alone even though their pid is
// alive and its own.
var live = struct {
	sync.Mutex
	names map[string]bool
}{names: map[string]bool{}}

func claim(names ...string) {
	live.Lock()
	defer live.Unlock()
	for _, n := range names {
		live.names[n] = true
	}
}

func release(names ...string) {
	live.Lock()
	defer live.Unlock()
	for _, n := range names {
		delete(live.names, n)
	}
}

func isLive(name string) bool {
	live.Lock()
	defer live.Unlock()
	return live.names[name]
}

// runPrefix is the name prefix of run seq of this process.
func runPrefix(seq int64) string {
	return fmt.Sprintf("%s%d-%d-", prefix, os.Getpid(), seq)
}

// ownerPID returns the pid in a name made by this package, or false.
func ownerPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	pidStr, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// alive tells whether process pid exists.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// runTool runs the ip (or tc) tool with a bounded time and puts its
// combined output in the error.
func runTool(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v: %s", ErrSetup, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// addNetns makes the named network namespace with `ip netns add`, which
// also makes /run/netns a shared mount the way `ip netns exec` expects.
func addNetns(name string) error {
	return runTool("ip", "netns", "add", name)
}

// delNetns removes a named namespace as `ip netns delete` does: detach the
// bind mount and unlink the file. The namespace itself goes away with its
// last user (devices in it go with it). A name that is already gone is no
// error.
func delNetns(name string) error {
	p := filepath.Join(netnsDir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: unmount %s: %w", ErrCleanup, p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrCleanup, err)
	}
	return nil
}

// Cleanup removes the namespaces left by runs whose process died: every
// psim-<pid>-* in /run/netns whose pid is no longer alive, and those of
// this very process that no live Net owns (a pid reused after a crash).
// It returns the names it removed. Start calls it first; the CLI may call
// it on its own (it needs root).
func Cleanup(log *slog.Logger) (removed []string, err error) {
	if log == nil {
		log = slog.Default()
	}
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCleanup, err)
	}
	self := os.Getpid()
	var errs []error
	for _, e := range ents {
		name := e.Name()
		pid, ok := ownerPID(name)
		if !ok {
			continue
		}
		if pid == self && isLive(name) || pid != self && alive(pid) {
			continue
		}
		if err := delNetns(name); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("netem: removed leftover namespace", "netns", name, "pid", pid)
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// inNetns runs f on a locked OS thread switched into the network namespace
// bound at path, then switches the thread back. If the thread cannot be
// switched back it is thrown away (its goroutine ends locked) so that no
// other goroutine ever runs in the wrong namespace. A panic in f is raised
// again in the caller.
func inNetns(path string, f func() error) error {
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrNamespace, path, err)
	}
	defer unix.Close(target)

	type result struct {
		err   error
		panic any
		ok    bool
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if !r.ok {
				r.panic = recover()
			}
			done <- r
		}()
		runtime.LockOSThread()
		orig, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			r.err, r.ok = fmt.Errorf("%w: open own namespace: %w", ErrNamespace, err), true
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			r.err, r.ok = fmt.Errorf("%w: setns %s: %w", ErrNamespace, path, err), true
			return
		}
		defer func() {
			if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
				// Leave the thread locked: it dies with this goroutine.
				if r.err == nil {
					r.err = fmt.Errorf("%w: restore namespace: %w", ErrNamespace, err)
				}
				return
			}
			runtime.UnlockOSThread()
		}()
		r.err = f()
		r.ok = true
	}()
	r := <-done
	if !r.ok {
		panic(r.panic)
	}
	return r.err
}

// congestionFile is the calling thread's network namespace's default TCP
// congestion control, for sockets made after it is set.
const congestionFile = "/proc/sys/net/ipv4/tcp_congestion_control"

// setCongestion sets the TCP congestion control of the namespace the
// calling thread is in (run it through Net.Do).
func setCongestion(name string) error {
	if err := os.WriteFile(congestionFile, []byte(name), 0); err != nil {
		return fmt.Errorf("%w: TCP congestion control %q: %w", ErrSpec, name, err)
	}
	return nil
}

// allowedFile lists the congestion controls that a namespace other than
// the machine's own may make its default.
const allowedFile = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"

// allowMu serializes allowCongestion's read and write of allowedFile.
var allowMu sync.Mutex

// allowCongestion adds name to the machine's allowed congestion controls
// if it is not there: the kernel refuses a namespace a default it does
// not allow. It is left there (runs in parallel may rely on it); all it
// permits is choosing that algorithm.
func allowCongestion(name string, log *slog.Logger) error {
	allowMu.Lock()
	defer allowMu.Unlock()
	b, err := os.ReadFile(allowedFile)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	have := strings.Fields(string(b))
	if slices.Contains(have, name) {
		return nil
	}
	if err := os.WriteFile(allowedFile, []byte(strings.Join(append(have, name), " ")), 0); err != nil {
		return fmt.Errorf("%w: allow TCP congestion control %q: %w", ErrSpec, name, err)
	}
	log.Info("netem: allowed a TCP congestion control for namespaces", "name", name, "sysctl", "net.ipv4.tcp_allowed_congestion_control")
	return nil
}
