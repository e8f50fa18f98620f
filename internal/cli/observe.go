package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/pipeshard/pipeshard/internal/dashboard"
	"github.com/pipeshard/pipeshard/internal/metrics"
	"github.com/pipeshard/pipeshard/internal/status"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// observeFlags declares a node's --metrics and --ui. They may name the
// same address: one listener then serves both.
func observeFlags(fs *flag.FlagSet) {
	fs.String("metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics (host:port)")
	fs.String("ui", "", "serve the live swarm dashboard at http://`ADDR`/ (host:port), with /metrics beside it")
}

// nodeObs is a node's metrics and dashboard, as its flags ask.
type nodeObs struct {
	metricsAddr, uiAddr string
	m                   *metrics.Node
	n                   *node.Node // set by start; the gauges read it
}

func newNodeObs(fs *flag.FlagSet) *nodeObs {
	o := &nodeObs{metricsAddr: flagString(fs, "metrics"), uiAddr: flagString(fs, "ui")}
	if o.metricsAddr == "" && o.uiAddr == "" {
		return o
	}
	o.m = metrics.NewNode(metrics.NodeGauges{
		QueuedTokens: func() float64 { return float64(o.n.Stage.Snapshot().QueuedTokens) },
		Sessions:     func() float64 { return float64(o.n.Stage.Sessions()) },
		KVBytes:      func() float64 { return float64(o.n.Stage.KVBytes()) },
	})
	return o
}

// observer is what the node's stage reports to (nil: nothing).
func (o *nodeObs) observer() node.StageObserver {
	if o.m == nil {
		return nil
	}
	return o.m
}

// start serves the metrics and the dashboard of n until ctx ends or stop
// is called.
func (o *nodeObs) start(ctx context.Context, out io.Writer, n *node.Node, log *slog.Logger) (stop func(), err error) {
	if o.m == nil {
		return func() {}, nil
	}
	o.n = n
	ctx, cancel := context.WithCancel(ctx)
	muxes := map[string]*http.ServeMux{}
	mux := func(addr string) *http.ServeMux {
		if muxes[addr] == nil {
			muxes[addr] = http.NewServeMux()
		}
		return muxes[addr]
	}
	if o.metricsAddr != "" {
		mux(o.metricsAddr).Handle("GET /metrics", o.m.Handler())
	}
	if o.uiAddr != "" {
		tr, err := status.NewTracker(n.PubSub, n.Header.ModelID, status.DefaultTTL, nil)
		if err != nil {
			cancel()
			return nil, err
		}
		go tr.Run(ctx)
		h := n.Header
		d := dashboard.New(dashboard.Config{Model: h.Name, Layers: h.Config.Layers, Vocab: h.Config.Vocab, Self: n.ID().String(), Role: "node",
			Records: tr.Records, Routes: func() []dashboard.Route { return servedRoutes(n.Stage) },
			Tokens: func() float64 { return float64(n.Stage.Snapshot().Tokens) }})
		go d.Run(ctx)
		m := mux(o.uiAddr)
		mountDashboard(m, d)
		if o.uiAddr != o.metricsAddr {
			m.Handle("GET /metrics", o.m.Handler())
		}
	}
	var srvs []*http.Server
	stop = func() {
		cancel()
		for _, s := range srvs {
			sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.Shutdown(sctx)
			scancel()
		}
	}
	for addr, m := range muxes {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			stop()
			return nil, usagef("HTTP address %q: %v", addr, err)
		}
		srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
		srvs = append(srvs, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Warn("metrics/dashboard server", "addr", addr, "err", err)
			}
		}()
		what := "metrics at http://" + ln.Addr().String() + "/metrics"
		if addr == o.uiAddr {
			what = "dashboard at http://" + ln.Addr().String() + "/ (metrics at /metrics)"
		}
		fmt.Fprintln(out, "serving", what)
	}
	return stop, nil
}

// mountDashboard puts the dashboard's page and JSON on mux.
func mountDashboard(mux *http.ServeMux, d *dashboard.Dashboard) {
	mux.Handle("GET /{$}", d)
	mux.Handle("GET /api/swarm", d)
}

// servedRoutes are the routes of the sessions st serves.
func servedRoutes(st *node.Stage) []dashboard.Route {
	var out []dashboard.Route
	for _, r := range st.Routes() {
		dr := dashboard.Route{Session: r.Session, Hop: r.Hop}
		for _, h := range r.Hops {
			dr.Hops = append(dr.Hops, dashboard.RouteHop{Peer: h.Peer, Start: h.Start, End: h.End})
		}
		out = append(out, dr)
	}
	return out
}

// clientRoutes are the routes of c's open sessions.
func clientRoutes(c *swarm.Client) []dashboard.Route {
	var out []dashboard.Route
	for _, s := range c.Sessions() {
		dr := dashboard.Route{Session: s.ID, Hop: -1}
		for _, h := range s.Route {
			dr.Hops = append(dr.Hops, dashboard.RouteHop{Peer: h.Peer.ID.String(), Start: h.Start, End: h.End})
		}
		out = append(out, dr)
	}
	return out
}

// observeClient gives c Prometheus metrics and a dashboard of model m,
// mounted on mux at /metrics and / (with /api/swarm). Call it before c
// opens sessions; the dashboard samples until ctx ends.
func observeClient(ctx context.Context, mux *http.ServeMux, c *swarm.Client, m *shards.Manifest) error {
	cm := metrics.NewClient()
	c.Observe(cm)
	mux.Handle("GET /metrics", cm.Handler())
	tr, err := c.Status(m.ModelID)
	if err != nil {
		return err
	}
	d := dashboard.New(dashboard.Config{Model: m.Name, Layers: m.Config.Layers, Vocab: m.Config.Vocab, Self: c.Host.ID().String(), Role: "client",
		Records: tr.Records, Routes: func() []dashboard.Route { return clientRoutes(c) }, Tokens: cm.TokensGenerated})
	go d.Run(ctx)
	mountDashboard(mux, d)
	return nil
}
