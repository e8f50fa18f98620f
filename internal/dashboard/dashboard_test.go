package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pipeshard/pipeshard/internal/dashboard"
	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/metrics"
	"github.com/pipeshard/pipeshard/internal/status"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/internal/teststore"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/swarm"
)

// palette is the page's node colours, in node order.
var palette = [][3]uint8{{0x4e, 0x79, 0xa7}, {0xf2, 0x8e, 0x2b}, {0xe1, 0x57, 0x59}}

// chromium finds the browser, or fails (CI) or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is missing and CI is set: .ci/run installs Debian's chromium package")
	}
	t.Skip("chromium is missing (apt-get install chromium)")
	return ""
}

func startNode(t *testing.T, ctx context.Context, st *teststore.Store, shard string, boot []string) *node.Node {
	t.Helper()
	home := filepath.Join(t.TempDir(), "node")
	st.CopyTo(t, home, shard, st.MC.String(), st.Manifest.Tokenizer.CID)
	n, err := node.New(ctx, node.Config{Home: home, Shard: shard, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1, Bootstrap: boot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	go n.Run(ctx)
	return n
}

// TestPageInChromium serves the dashboard of a client of a real
// three-node swarm (stories15M; two providers of the first layer range,
// one of the second) with a session open, loads it in headless Chromium
// and checks the DOM it builds and the screenshot it draws.
func TestPageInChromium(t *testing.T) {
	browser := chromium(t)
	modelPath, tok := testmodel.Stories15M(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := teststore.Build(ctx, t.TempDir(), modelPath, tok, teststore.Cut{Balanced: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, m := st.Cuts[0], st.Manifest
	a := startNode(t, ctx, st, l.Shards[0].CID, nil)
	startNode(t, ctx, st, l.Shards[1].CID, a.Addrs())
	startNode(t, ctx, st, l.Shards[0].CID, a.Addrs())

	cm := metrics.NewClient()
	c, err := swarm.New(ctx, swarm.Config{Home: t.TempDir(), Bootstrap: a.Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Observer: cm})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr, err := c.Status(m.ModelID)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(ctx, func(rs []status.Record) bool { return len(rs) == 3 }); err != nil {
		t.Fatalf("status records: %v (have %d)", err, len(tr.Records()))
	}
	hops, _, provs, err := c.FindRoute(ctx, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(dashboard.Config{Model: m.Name, Layers: m.Config.Layers, Vocab: m.Config.Vocab, Self: c.Host.ID().String(), Role: "client",
		Records: tr.Records, Routes: func() []dashboard.Route { return clientRoutes(c) }, Tokens: cm.TokensGenerated,
		Every: 200 * time.Millisecond})
	go d.Run(ctx)
	srv := httptest.NewServer(d)
	defer srv.Close()

	r, err := c.OpenResilient(ctx, m, provs, hops, swarm.SessionOptions{ModelID: m.ModelID, Vocab: m.Config.Vocab, MaxLen: m.Config.Context}, swarm.FailoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() // open while the page loads: a live route
	if _, err := generate.Run(ctx, r, []int{1, 450, 8338, 265}, generate.Options{MaxTokens: 40, IgnoreEOS: true, Context: m.Config.Context}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a few throughput samples after the generation

	// The JSON: three nodes, full coverage, the open route.
	snap := getSnapshot(t, srv.URL+"/api/swarm")
	if len(snap.Nodes) != 3 || len(snap.Routes) != 1 || len(snap.Routes[0].Hops) != 2 {
		t.Fatalf("snapshot: %d nodes, %d routes (%+v)", len(snap.Nodes), len(snap.Routes), snap.Routes)
	}
	// Two providers of the first range, one of the second.
	first := l.Shards[0].Stage()
	for layer, n := range snap.Coverage {
		want := 1
		if layer >= first.Start && layer < first.End {
			want = 2
		}
		if n != want {
			t.Errorf("layer %d served by %d nodes, want %d", layer, n, want)
		}
	}
	if snap.HeadCoverage != 1 {
		t.Errorf("head coverage %d, want 1", snap.HeadCoverage)
	}
	var peak float64
	for _, s := range snap.Throughput {
		peak = max(peak, s.TokensPerSec)
	}
	if peak <= 0 {
		t.Errorf("throughput history %v shows no tokens", snap.Throughput)
	}

	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, browser, append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
			"--window-size=1280,800", "--virtual-time-budget=5000", "--user-data-dir=" + t.TempDir()}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}

	// The DOM: the page marks that it drew a snapshot, one coverage bar
	// per node, the route, and where the coverage chart is.
	dom := string(run("--dump-dom", srv.URL+"/"))
	body := regexp.MustCompile(`<body[^>]*>`).FindString(dom)
	for _, want := range []string{`data-loaded="true"`, `data-nodes="3"`, `data-routes="1"`} {
		if !strings.Contains(body, want) {
			t.Errorf("body %s lacks %s", body, want)
		}
	}
	if n := strings.Count(dom, `class="cov-bar"`); n != 3 {
		t.Errorf("%d coverage bars in the DOM, want 3", n)
	}
	if n := strings.Count(dom, `class="route"`); n != 1 {
		t.Errorf("%d route paths in the DOM, want 1", n)
	}
	rect := regexp.MustCompile(`data-coverage-rect="(\d+),(\d+),(\d+),(\d+)"`).FindStringSubmatch(body)
	if rect == nil {
		t.Fatalf("no coverage rectangle in %s", body)
	}
	var cr [4]int
	for i := range cr {
		cr[i], _ = strconv.Atoi(rect[i+1])
	}

	// The screenshot: each node's colour fills one bar in the coverage
	// chart, on its own row, spanning its layers of the layer axis.
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	run("--screenshot="+shot, srv.URL+"/")
	if dir := os.Getenv("DASHBOARD_SCREENSHOT"); dir != "" {
		b, _ := os.ReadFile(shot)
		os.WriteFile(dir, b, 0o644)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
		t.Fatalf("screenshot is %v", b)
	}
	if n := colours(img, img.Bounds()); n < 50 {
		t.Errorf("screenshot has %d colours: blank?", n)
	}
	area := image.Rect(cr[0], cr[1], cr[0]+cr[2], cr[1]+cr[3])
	var boxes []image.Rectangle
	for i, p := range palette {
		box, px := find(img, area, p)
		if px < 200 {
			t.Fatalf("node %d's colour %x: %d pixels in the coverage chart %v", i, p, px, area)
		}
		if box.Dy() < 10 || box.Dy() > 24 {
			t.Errorf("node %d's bar is %d px high: not one bar", i, box.Dy())
		}
		boxes = append(boxes, box)
	}
	x0, x1 := boxes[0].Min.X, boxes[0].Max.X
	for _, b := range boxes {
		x0, x1 = min(x0, b.Min.X), max(x1, b.Max.X)
	}
	// The axis is the layers and then one unit for the output head, whose
	// rows a node serves map onto that unit.
	L, V := m.Config.Layers, float64(m.Config.Vocab)
	for i, n := range snap.Nodes {
		lo, hi := float64(n.Start), float64(n.End)
		if n.End == L {
			hlo, hhi := float64(n.HeadLo), float64(n.HeadHi)
			if n.HeadLo == 0 && n.HeadHi == 0 {
				hhi = V
			}
			if n.Start == L {
				lo = float64(L) + hlo/V
			}
			hi = float64(L) + hhi/V
		}
		b := boxes[i]
		if i > 0 && b.Min.Y < boxes[i-1].Max.Y {
			t.Errorf("bars %d and %d share rows: %v, %v", i-1, i, boxes[i-1], b)
		}
		unit := float64(x1-x0) / float64(L+1)
		gotLo, gotHi := float64(b.Min.X-x0)/unit, float64(b.Max.X-x0)/unit
		if abs(gotLo-lo) > 0.03 || abs(gotHi-hi) > 0.03 {
			t.Errorf("node %d's bar spans %.3f–%.3f of the axis; its record (layers %d–%d, head %d–%d) %.3f–%.3f",
				i, gotLo, gotHi, n.Start, n.End, n.HeadLo, n.HeadHi, lo, hi)
		}
	}
}

func clientRoutes(c *swarm.Client) []dashboard.Route {
	var out []dashboard.Route
	for _, s := range c.Sessions() {
		r := dashboard.Route{Session: s.ID, Hop: -1}
		for _, h := range s.Route {
			r.Hops = append(r.Hops, dashboard.RouteHop{Peer: h.Peer.ID.String(), Start: h.Start, End: h.End})
		}
		out = append(out, r)
	}
	return out
}

func getSnapshot(t *testing.T, url string) dashboard.Snapshot {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s dashboard.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func abs(x float64) float64 { return max(x, -x) }

// near reports whether the pixel at x, y is colour c, within a little
// for the browser's rounding.
func near(img image.Image, x, y int, c [3]uint8) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	d := func(v uint32, w uint8) bool { return abs(float64(v>>8)-float64(w)) <= 3 }
	return d(r, c[0]) && d(g, c[1]) && d(b, c[2])
}

// find returns the bounding box of the pixels of colour c in area and
// their number.
func find(img image.Image, area image.Rectangle, c [3]uint8) (image.Rectangle, int) {
	var box image.Rectangle
	n := 0
	for y := area.Min.Y; y < area.Max.Y; y++ {
		for x := area.Min.X; x < area.Max.X; x++ {
			if near(img, x, y, c) {
				box = box.Union(image.Rect(x, y, x+1, y+1))
				n++
			}
		}
	}
	return box, n
}

func colours(img image.Image, area image.Rectangle) int {
	seen := map[uint32]bool{}
	for y := area.Min.Y; y < area.Max.Y; y += 2 {
		for x := area.Min.X; x < area.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			seen[r>>8<<16|g>>8<<8|b>>8] = true
		}
	}
	return len(seen)
}

// TestThroughputRing samples a counter on a fake clock: rates per
// period, oldest first, the ring keeping the last History samples.
func TestThroughputRing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tokens atomic.Uint64
		d := dashboard.New(dashboard.Config{Tokens: func() float64 { return float64(tokens.Load()) }, Every: time.Second, History: 3})
		ctx, cancel := context.WithCancel(t.Context())
		go d.Run(ctx)
		synctest.Wait() // the baseline, at 0 tokens
		for _, add := range []uint64{5, 10, 0, 7} {
			tokens.Add(add)
			time.Sleep(time.Second)
			synctest.Wait()
		}
		cancel()
		var got []float64
		for _, s := range d.Snapshot().Throughput {
			got = append(got, s.TokensPerSec)
		}
		if want := []float64{10, 0, 7}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("throughput %v, want %v", got, want)
		}
	})
}
