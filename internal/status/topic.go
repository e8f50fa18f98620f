package status

import (
	"log/slog"
	"sync"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
)

// A PubSub refuses a second Join of a topic, so the Publisher and the
// Tracker of one model on one PubSub share a single handle, counted here.
var joined struct {
	sync.Mutex
	m map[topicKey]*sharedTopic
}

type topicKey struct {
	ps   *pubsub.PubSub
	name string
}

type sharedTopic struct {
	t    *pubsub.Topic
	refs int
}

// joinTopic returns ps's handle of the topic name, joining it on first
// use, and a func that releases it; the last release closes the topic.
func joinTopic(ps *pubsub.PubSub, name string) (*pubsub.Topic, func(), error) {
	joined.Lock()
	defer joined.Unlock()
	k := topicKey{ps, name}
	s, ok := joined.m[k]
	if !ok {
		t, err := ps.Join(name)
		if err != nil {
			return nil, nil, err
		}
		s = &sharedTopic{t: t}
		if joined.m == nil {
			joined.m = make(map[topicKey]*sharedTopic)
		}
		joined.m[k] = s
	}
	s.refs++
	var once sync.Once
	return s.t, func() { once.Do(func() { releaseTopic(k, s) }) }, nil
}

func releaseTopic(k topicKey, s *sharedTopic) {
	joined.Lock()
	defer joined.Unlock()
	s.refs--
	if s.refs > 0 {
		return
	}
	delete(joined.m, k)
	if err := s.t.Close(); err != nil {
		logger().Debug("closing topic", "topic", k.name, "err", err)
	}
}

func logger() *slog.Logger { return slog.Default().With("system", "status") }
