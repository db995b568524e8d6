package operator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// An unauthenticated client on the xDS port sending made-up JWTs (the
// right audience, a future exp, any pod name and UID, junk signatures), a
// new one on every stream and thousands a second, must not lock new
// sidecars out: tokens claiming no injected pod the operator knows cost
// no review and spend no budget, so every new sidecar's first attempt
// succeeds during the attack.
func TestMadeUpTokensDoNotLockNewSidecarsOut(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	ns := namespace(t, c)
	if err := c.Create(ctx, newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	const sidecars = 20
	toks := make([]string, sidecars)
	for i := range sidecars {
		p := createPod(t, ns, fmt.Sprintf("web-%d", i), "web")
		toks[i] = podToken(t, p, xdsAudience)
	}
	legit := xdsConn(t)
	// The tier is published (and the operator ready) before the attack.
	eventually(t, 30*time.Second, func() error {
		_, err := xdsAttempt(t, legit, toks[0], ns+"/web-0", ns+"/web", "")
		return err
	})

	// The attacker: its own connection, made-up JWTs that pass the
	// prescreen, a new one on every stream. Bounded in time and count.
	attacker := xdsConn(t)
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	exp := time.Now().Add(time.Hour).Unix()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				claims := fmt.Sprintf(`{"aud":[%q],"exp":%d,"kubernetes.io":{"namespace":"x","pod":{"name":"p","uid":"u-%d-%d"}}}`, xdsAudience, exp, g, i)
				_, _ = xdsAttempt(t, attacker, forgedJWT(claims, i), "x/p", "x/t", "")
				sent.Add(1)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	// Let the attacker spend the burst first.
	for end := time.Now().Add(30 * time.Second); sent.Load() < 2000 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond) // a bounded poll of the attacker's progress, not a barrier
	}
	start, startSent := time.Now(), sent.Load()

	// Twenty new sidecars (each with its own fresh token) try once each,
	// spread over a second, as pods starting during the attack would.
	var refused int
	for i := 1; i < sidecars; i++ {
		_, err := xdsAttempt(t, legit, toks[i], fmt.Sprintf("%s/web-%d", ns, i), ns+"/web", "")
		switch status.Code(err) {
		case codes.OK:
		case codes.Unavailable:
			refused++
		default:
			t.Fatalf("sidecar web-%d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond) // spacing of the sidecars' attempts, not a barrier
	}
	rate := float64(sent.Load()-startSent) / time.Since(start).Seconds()
	t.Logf("attacker: %.0f made-up JWTs a second on one connection; %d of %d first attempts of new sidecars refused", rate, refused, sidecars-1)
	if refused > 0 {
		t.Errorf("an unauthenticated client sending made-up JWTs got %d of %d new sidecars' valid tokens refused (Unavailable)", refused, sidecars-1)
	}
}

// Tokens the prescreen refuses cost no review and take no place in the
// review cache: a client sending strings that are not even JWTs, more
// than the cache holds, does not push a legitimate sidecar's cached review
// out, so its reconnection needs no new TokenReview.
func TestJunkTokensDoNotEvictCachedReviews(t *testing.T) {
	ns, _, tok, legit := servedPod(t, needCluster(t))
	okBefore := tokenReviews(t, reviewAuthenticated)

	attacker := xdsConn(t)
	var wg sync.WaitGroup
	const perWorker = reviewCacheSize/4 + 500
	deadline := time.Now().Add(60 * time.Second)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker && time.Now().Before(deadline); i++ {
				_, _ = xdsAttempt(t, attacker, fmt.Sprintf("junk-%d-%d", g, i), "x/p", "x/t", "")
			}
		}()
	}
	wg.Wait()

	if _, err := xdsAttempt(t, legit, tok, ns+"/web-0", ns+"/web", ""); err != nil {
		t.Fatalf("the legitimate sidecar's reconnection: %v", err)
	}
	if got := tokenReviews(t, reviewAuthenticated) - okBefore; got != 0 {
		t.Errorf("after %d junk tokens (no JWTs, no review) the legitimate sidecar's reconnection with its still valid token needed %v new TokenReview(s): its cached review was evicted", 4*perWorker, got)
	}
}
