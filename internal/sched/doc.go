// Package sched is a stage's micro-batching scheduler, with no I/O: the
// decisions of which queued forwards run together, when, and how much
// each session may send. The node's stage (node/stage.go) drives it over
// the real network; a simulator can drive it in virtual time; tests drive
// it from scripts (testdata/*.txt).
//
// Like etcd's raft, it takes inputs and hands back decisions as data. It
// starts no goroutines, reads no clock and does no I/O: time is a
// time.Duration since an origin the driver chooses, passed in with every
// call that needs it. It iterates no map to decide anything, so the same
// calls give the same decisions, and a run can be replayed exactly.
//
// # The loop
//
// A driver owns one Sched per stage and serializes its calls:
//
//	s, _ := sched.New(sched.Config{})
//	s.Open(id, client, hasNextHop)   // a session is admitted
//	// per session, a reader: while s.Room(id) > 0, read a forward and
//	j, err := s.Arrive(now, id, tokens, bytes) // keep the payload under j.ID
//	s.Grant(id, n)                   // the next hop granted n forwards
//	// the executor:
//	for {
//		rd := s.Next(now)
//		switch {
//		case len(rd.Batch) > 0:
//			run rd.Batch as one forward (one job per session)
//			for _, c := range s.Done(now, computeTime) {
//				send Credit{c.Session, c.N} upstream; wake c.Session's reader
//			}
//		case rd.Wait > 0:
//			sleep until now+rd.Wait or the next input, whichever is first
//		default:
//			sleep until the next input
//		}
//	}
//	s.Close(id)                      // free the returned waiting jobs
//
// The caller's duties: call Next after every input (Arrive, Grant, Close)
// and when a Wait has passed; run a batch's jobs in one forward and call
// Done once it has run (Next returns nothing while a batch runs); read a
// session's stream only while Room > 0 (Arrive refuses a forward past the
// credit with ErrNoCredit); send the Credits that Done returns upstream.
//
// # Credits (backpressure)
//
// Each session may have at most Config.Credit (C, default 4) forwards at
// the stage, waiting or running. The stage announces C to its upstream
// (the client, or the previous hop) with a Credit message right after
// Opened, and returns one credit per forward when its batch has run (see
// docs/protocol.md). A well-behaved upstream sends only with credit; the
// stage reads a session's stream only while Room > 0, so a sender that
// ignores credits is stopped by the transport's flow control (yamux's
// window), not by the stage's memory. The stage therefore holds at most
// sessions × C forwards: at most sessions × C × max frame bytes, and the
// number of sessions is bounded by the node's session limit and KV budget.
//
// Credits also flow between hops: a session opened with limited set runs
// only while its next hop has granted credit (Grant). A slow next hop thus
// holds back only its own sessions' forwards, which stay queued here and,
// their credit spent, stop the upstream in turn; the other sessions'
// batches go on. A last hop's results go to the client, which grants no
// credit: its sessions are not limited.
//
// # Fair batches
//
// A batch is formed round robin over clients, and over each client's
// sessions, under a token budget (Config.BatchTokens, default 256; a
// prefill chunk counts its tokens). The clients are kept in the order of
// their first session; one leads each batch, and the lead passes to the
// client after it. From the leader, each client in turn gives its next
// session's first forward (sessions of a client also in turn), pass after
// pass, until the budget is spent or no client has anything that fits. A
// session gives at most one forward per batch (one forward of a model
// takes a request once). A forward that does not fit the rest of the
// budget ends its client's share of this batch but keeps its place, and a
// single forward larger than the whole budget runs, alone, when its client
// leads.
//
// So a client's share of a batch does not grow with its sessions or the
// size of its prefills: when two clients both have more queued than a
// batch takes, they get the same tokens per pass; when one asks for less,
// it gets all it asks for and the other the rest (the batch is never kept
// short to be fair). The lead moves on past the leader, never past a
// client with a ready forward, so such a client leads a batch within as
// many batches as there are clients, and the leader's first forward always
// runs: nothing starves.
//
// # The gathering window
//
// When forwards are waiting and the stage is idle, running them at once
// is usually best. Waiting a little pays only if more forwards are likely
// to arrive soon enough to ride in the same batch: one decode forward
// costs about as much alone as in a small batch (each weight matrix is
// read once per batch), so a rider saves itself a whole extra forward
// while every waiting job pays the wait. With k forwards ready, an
// estimated arrival rate λ (the inverse of the EWMA of the gaps between
// arrivals, made larger by a quiet spell since the last one) and c the
// EWMA compute time of a decode batch, waiting w gathers about λw riders,
// each saving about c − w, at a cost of k·w:
//
//	gain(w) = λw(c − w) − kw,  positive iff λ(c − w) > k,
//	best at w* = (c − k/λ)/2.
//
// The window is w* (0 when λc ≤ k: fewer arrivals are expected during one
// forward than are already waiting), capped by
//
//   - c/4, so a wait never costs more than a quarter of one forward,
//   - free/λ, the time in which every session with nothing queued is
//     expected to have sent (no more riders can come),
//   - Config.MaxWindow (default 5 ms),
//
// and it is 0 when the ready forwards already fill the budget, when every
// session already has a forward waiting, or before c has been measured.
// The window runs from the moment the oldest ready forward became ready
// (its arrival, or the end of the previous batch), and is recomputed on
// every call, so each arrival can only shorten it.
//
// # Convoys
//
// Sessions that loop around a route of S stages pipeline best as S groups,
// one computing at each stage. A stage that batches every waiting forward
// merges groups that reach it together into one convoy, which then
// travels as one: while it computes at one stage the others idle (two
// streams on two stages ran at 1.44× one stream, not near 2×). The stage
// caps its batches (SetMaxBatch) at its open sessions over the hops of
// their routes, rounded up; node's batchCap. On 2 one-core stages this
// took 2 streams from 1.23× to 1.45× (stories15M) and from 1.44× to
// 1.75× (llama3-1b q4) the unsplit model's tokens/s, with 4 and 8
// streams unchanged within noise (docs/benchmarks.md).
//
// The window is a small effect, and should be: most batching comes from
// forwards that queue while a batch runs. TestRouteModel measures it on a
// 2-stage route in virtual time. With independent users (random think
// times) it fills batches a little more and gains up to 2% of throughput.
// With sessions in a tight loop that are latency-bound (the stages mostly
// idle), it costs 3-5%: correlated arrivals make λ promise riders that do
// not come. On one processor shared by the whole route it changes
// nothing. A window long enough to merge the groups of forwards a tight
// loop settles into (they come about one forward apart) costs far more
// in that model (34-42% of throughput at 8 sessions), so the cap stays
// at c/4.
//
// # Driving it from a simulator
//
// sim/scale's nodes each hold a Sched, with now the simulation's clock
// (sim/scale/sim.go: enter, leave, arrive, kick, wake, batchDone): Open
// when a session's route is built (each simulated session its own
// client); on a job's arrival event, Arrive and then Next; for a Ready
// batch, schedule the batch-done event at now + the stage's service time
// for the batch's tokens; for a Wait, schedule a wake-up event at
// now+Wait that calls Next; on batch done, Done, pass the jobs on, and
// call Next again; Close when a session leaves the node; a new Sched when
// the node stops serving. Every decision is then a pure function of the
// event sequence, as the simulator requires. The simulation models no
// credit messages (a session has one job in flight on its route), so its
// sessions' credit is unbounded; pipeline_test.go drives credits and
// grants between hops for a small route.
package sched
