package redisstore

import (
	"context"
	"errors"
)

// The hybrid mode's failure states per node. With a ClusterClient (a
// Ring), each master (shard) has its own, the plain mode's per-node
// breaker (plainbreaker.go): a failed flush is evidence against the nodes
// of its failed items only, a node's keys get the failure policy while
// it is open, and the other nodes' keys keep their local and exact
// decisions (docs/design.md §10, "Per node").

// nodeOf returns the address of k's node (with a ClusterClient or a
// Ring), looked up once. h.mu is held.
func (h *hybrid) nodeOf(k *hkey, key string) string {
	if !k.nodeSet {
		k.node, _ = h.l.node(context.Background(), key)
		k.nodeSet = true
	}
	return k.node
}

// nodeErr is nil unless the failure state of k's node holds (with a
// ClusterClient or a Ring, where each node has its own): then it is the
// error for a policy answer. h.mu is held.
func (h *hybrid) nodeErr(k *hkey, key string) error {
	if !h.l.multi || h.l.nodeCount.Load() == 0 || h.l.closed.Load() {
		return nil
	}
	if v, ok := h.l.nodes.Load(h.nodeOf(k, key)); ok {
		return v.(*plainBreaker).err()
	}
	return nil
}

// openedNode is opened for one node's failure state (a ClusterClient's
// master, a Ring's shard): its keys need a new observation. Observations
// in flight on any node are dropped too (trips), which costs exact
// decisions, not admissions.
func (h *hybrid) openedNode(addr string) {
	h.mu.Lock()
	h.trips++
	for key, k := range h.keys {
		if h.nodeOf(k, key) == addr {
			k.seen, k.fullN = false, 0
		}
	}
	h.mu.Unlock()
}

// judgeNodes judges a failed flush node by node (a ClusterClient's
// masters, a Ring's shards; each has its own failure state): each item
// with no reply (err: its pipeline's failure) or a failed one is evidence
// against its key's node, once per node. Another node's reply says
// nothing of it.
func (h *hybrid) judgeNodes(items []flushItem, replies []reply, err error) {
	l := h.l
	seen := map[*plainBreaker]bool{}
	for i, it := range items {
		e := err
		if i < len(replies) {
			e = replies[i].err
		}
		if e == nil || keyError(e) || errors.Is(e, errNotSent) || classify(e) == noEvidence {
			continue
		}
		pb := l.breakerFor(context.Background(), it.key, true)
		if pb == nil || seen[pb] {
			continue
		}
		seen[pb] = true
		key := it.key
		pb.key.Store(&key)
		if classify(e) == proof {
			pb.trip(e)
		} else {
			pb.suspect()
		}
	}
}
