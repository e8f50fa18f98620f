package testwatch

import (
	"strings"
	"testing"
)

const dump = `goroutine 1 [chan receive, 12 minutes]:
testing.(*T).Run(0xc000102000, {0x1, 0x2}, 0x3)
	/usr/lib/go/src/testing/testing.go:2005 +0x485
main.main()
	_testmain.go:45 +0x9b

goroutine 40 [sync.Mutex.Lock, 9 minutes]:
sync.runtime_SemacquireMutex(0x1?, 0x0?, 0x0?)
	/usr/lib/go/src/runtime/sema.go:95 +0x25
sync.(*Mutex).Lock(...)
	/usr/lib/go/src/sync/mutex.go:81
github.com/pipeshard/pipeshard/node.(*Stage).drop(0xc0001, 0xc0002, {0x0, 0x0})
	/work/node/stage.go:700 +0x1
github.com/pipeshard/pipeshard/node.(*Stage).Run(0xc0001, {0x1, 0x2})
	/work/node/stage.go:290 +0x1
created by github.com/pipeshard/pipeshard/node.(*Node).Run in goroutine 7
	/work/node/node.go:200 +0x1

goroutine 41 [sync.Mutex.Lock, 9 minutes]:
sync.runtime_SemacquireMutex(0x1?, 0x0?, 0x0?)
	/usr/lib/go/src/runtime/sema.go:95 +0x25
github.com/pipeshard/pipeshard/node.(*Stage).drop(0xc0001, 0xc0003, {0x0, 0x0})
	/work/node/stage.go:700 +0x1
github.com/pipeshard/pipeshard/node.(*Stage).Run(0xc0001, {0x1, 0x2})
	/work/node/stage.go:290 +0x1

goroutine 57 [select, 2 minutes]:
github.com/pipeshard/pipeshard/swarm.(*Session).Step(0xc0004, {0x1})
	/work/swarm/session.go:100 +0x1
github.com/pipeshard/pipeshard/swarm_test.TestFailoverKilledNode.func2(0xc0005)
	/work/swarm/failover_test.go:80 +0x1
testing.tRunner(0xc0005, 0xc0006)
	/usr/lib/go/src/testing/testing.go:1934 +0xea

goroutine 60 [IO wait]:
internal/poll.runtime_pollWait(0x1, 0x72)
	/usr/lib/go/src/runtime/netpoll.go:351 +0x85
`

func TestSummary(t *testing.T) {
	got := Summary(dump, "tests still running after 20m")
	want := []string{
		"testwatch: tests still running after 20m; tests on a stack: TestFailoverKilledNode",
		"testwatch: 2× sync.Mutex.Lock 9m: sync.runtime_SemacquireMutex in node.(*Stage).drop ← node.(*Stage).Run",
		"testwatch: 1× select 2m: swarm.(*Session).Step ← swarm_test.TestFailoverKilledNode.func2",
	}
	if strings.TrimSpace(got) != strings.Join(want, "\n") {
		t.Errorf("Summary:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// A live dump: this test's own goroutine is named.
func TestReportNamesRunningTest(t *testing.T) {
	var b strings.Builder
	Report(&b, "asked")
	out := b.String()
	i := strings.Index(out, "testwatch: asked; tests on a stack: ")
	if i < 0 {
		t.Fatalf("no summary after the stacks:\n%s", out)
	}
	if !strings.Contains(out[i:], "TestReportNamesRunningTest") {
		t.Errorf("summary does not name the running test:\n%s", out[i:])
	}
}
