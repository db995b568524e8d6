package testredis

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	clusterSlots = 16384
	// clusterReadyTimeout bounds the wait for every node to report
	// cluster_state:ok after the MEETs.
	clusterReadyTimeout = 30 * time.Second
)

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts masters redis-server processes in cluster mode,
// splits the 16384 slots evenly between them, joins them with CLUSTER MEET
// and waits until every node reports cluster_state:ok with all of them
// known and all slots served. Options apply to every node.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	if masters < 1 || masters > 64 {
		t.Fatalf("testredis: StartCluster needs 1 to 64 masters, got %d", masters)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	clusterArgs := func(dir string) []string {
		return []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
		}
	}
	c := &Cluster{}
	for range masters {
		s := newServer(t, o, clusterArgs)
		s.p.busPort = true
		if err := s.p.start(); err != nil {
			t.Fatalf("testredis: cluster node: %v", err)
		}
		c.nodes = append(c.nodes, s)
	}
	if err := c.form(o.password); err != nil {
		t.Fatalf("testredis: forming the cluster: %v", err)
	}
	return c
}

func (c *Cluster) form(password string) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	n := len(c.nodes)
	for i, s := range c.nodes {
		addr := s.Addr()
		// Distinct epochs up front spare the nodes a round of collision
		// resolution after they meet.
		if _, err := do(ctx, addr, password, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", addr, err)
		}
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		if err := addSlots(ctx, addr, password, lo, hi); err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
	}
	first := c.nodes[0].Addr()
	for _, s := range c.nodes[1:] {
		host, port := splitAddr(s.Addr())
		if _, err := do(ctx, first, password, "CLUSTER", "MEET", host, port); err != nil {
			return fmt.Errorf("%s: CLUSTER MEET %s: %w", first, s.Addr(), err)
		}
	}
	want := []string{
		"cluster_state:ok",
		"cluster_slots_ok:" + strconv.Itoa(clusterSlots),
		"cluster_known_nodes:" + strconv.Itoa(n),
	}
	var last string
	for {
		ready := true
		for _, s := range c.nodes {
			v, err := do(ctx, s.Addr(), password, "CLUSTER", "INFO")
			info, _ := v.(string)
			if err != nil || !containsAll(info, want) {
				ready, last = false, fmt.Sprintf("%s: %v %s", s.Addr(), err, info)
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s; last CLUSTER INFO from %s", clusterReadyTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// addSlots assigns slots lo..hi with CLUSTER ADDSLOTSRANGE (Redis 7), or
// ADDSLOTS on servers that do not know it.
func addSlots(ctx context.Context, addr, password string, lo, hi int) error {
	_, err := do(ctx, addr, password, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi))
	if err == nil {
		return nil
	}
	if _, isReply := err.(respError); !isReply {
		return fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
	}
	args := []string{"CLUSTER", "ADDSLOTS"}
	for s := lo; s <= hi; s++ {
		args = append(args, strconv.Itoa(s))
	}
	if _, err := do(ctx, addr, password, args...); err != nil {
		return fmt.Errorf("CLUSTER ADDSLOTS: %w", err)
	}
	return nil
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func splitAddr(addr string) (host, port string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// Addrs are the nodes' host:port addresses, a seed list for a cluster
// client.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.Addr()
	}
	return out
}

// Nodes are the cluster's servers, to stop, pause or restart one.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}
