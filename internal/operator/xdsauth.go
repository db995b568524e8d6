package operator

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

// The bound-object claims a TokenReview reports for a token bound to a pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
	saUserPrefix = "system:serviceaccount:"
)

// Review cache bounds: a successful review is kept until the token's exp
// claim but never longer than reviewMaxAge (which is also how often every
// stream re-authenticates); a refused token is remembered for
// reviewFailureTTL so that a reconnect storm with it does not reach the API
// server; at most reviewCacheSize tokens are remembered.
const (
	reviewMaxAge     = 10 * time.Minute
	reviewFailureTTL = 5 * time.Second
	reviewCacheSize  = 10000
)

// Reviews of tokens not seen before are bounded by a token bucket, so
// that a client sending a new made-up token on every stream cannot make
// the operator spend its own API-server budget (TokenReviews are writes
// charged to the operator) on them. Over the bound a stream is refused
// with Unavailable and the sidecar retries with backoff: a reconnect
// storm of a whole fleet after an operator restart is spread out, not
// refused for good.
//
// Only a token that claims a pod the operator's cache knows (an injected
// pod, with the claimed UID) is reviewed at all, and each such pod has a
// small bucket of its own: anyone can write a JWT that claims some pod,
// so without these a client sending made-up tokens would keep the shared
// bucket empty and lock every new sidecar out. A tenant can spend only the
// buckets of pods whose UIDs it knows (its own), and a sidecar needs one
// review per token (a new token about every 8 minutes).
const (
	reviewsPerSecond = 50
	reviewBurst      = 100
	podReviewEvery   = 10 * time.Second
	podReviewBurst   = 5
	// maxPodBuckets bounds the pods remembered; past it they are
	// forgotten all at once (each starts with a full bucket again).
	maxPodBuckets = 100000
)

// boundPod is what a TokenReview proved about a token: the pod it is bound
// to, and until when that holds.
type boundPod struct {
	namespace, name, serviceAccount string
	uid                             types.UID
	until                           time.Time
}

// reviewResult is a cached review: a pod, or the refusal.
type reviewResult struct {
	pod boundPod
	// err is a gRPC status error: Unauthenticated (the API server's
	// refusal), or PermissionDenied (the token's pod will not do).
	err error
	// until is when the entry stops being used.
	until time.Time
}

// tokenAuthenticator authenticates xDS streams: the sidecar's projected
// ServiceAccount token is reviewed by the API server (TokenReview, with
// the xDS audience), the pod it is bound to is read, and the stream may
// subscribe only to that pod's tier, as that pod.
type tokenAuthenticator struct {
	// reviews creates TokenReviews; objects reads the bound pod and its
	// CacheTier (the manager's cache, which holds the injected pods only:
	// the API server is never asked for a pod a client names).
	reviews  client.Client
	objects  client.Reader
	audience string
	now      func() time.Time
	counter  *prometheus.CounterVec

	// limit bounds the TokenReviews sent for tokens not in the cache,
	// perPod bounds them per claimed pod.
	limit  *rate.Limiter
	perPod podLimits

	flight singleflight.Group
	mu     sync.Mutex
	cache  map[[sha256.Size]byte]reviewResult
}

// Results of tiercache_xds_token_reviews_total.
const (
	reviewAuthenticated = "authenticated"
	reviewRefused       = "refused"
	reviewError         = "error"
)

func newTokenAuthenticator(reviews client.Client, objects client.Reader, audience string, reg prometheus.Registerer) (*tokenAuthenticator, error) {
	a := &tokenAuthenticator{
		reviews: reviews, objects: objects, audience: audience, now: time.Now,
		limit: rate.NewLimiter(reviewsPerSecond, reviewBurst),
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_xds_token_reviews_total",
			Help: "TokenReviews the control plane sent to the API server for sidecar tokens, by result (authenticated, refused, error).",
		}, []string{"result"}),
		cache: make(map[[sha256.Size]byte]reviewResult),
	}
	if reg != nil {
		if err := reg.Register(a.counter); err != nil {
			return nil, fmt.Errorf("registering tiercache_xds_token_reviews_total: %w", err)
		}
	}
	return a, nil
}

// Authenticate implements controlplane.Authenticator.
func (a *tokenAuthenticator) Authenticate(ctx context.Context, node *corev3.Node) (controlplane.Identity, error) {
	tok, err := controlplane.BearerToken(ctx)
	if err != nil {
		return controlplane.Identity{}, err
	}
	h := sha256.Sum256([]byte(tok))
	bp, pod, err := a.review(ctx, h, tok)
	if err != nil {
		return controlplane.Identity{}, err
	}
	if want := bp.namespace + "/" + bp.name; node.GetId() != want {
		return controlplane.Identity{}, status.Errorf(codes.PermissionDenied, "node.id %q differs from the token's pod %q", node.GetId(), want)
	}
	if pod == nil { // a cached review: read the pod again, it may have changed
		if pod, err = a.pod(ctx, bp); err != nil {
			return controlplane.Identity{}, err
		}
	}
	key, err := a.podTier(ctx, bp, pod)
	if status.Code(err) == codes.PermissionDenied {
		// The pod will not do for a while whatever the stream claims:
		// the token's retries are answered from the cache.
		a.remember(h, reviewResult{err: err, until: a.now().Add(reviewFailureTTL)})
	}
	if err != nil {
		return controlplane.Identity{}, err
	}
	if node.GetCluster() != key {
		return controlplane.Identity{}, status.Errorf(codes.PermissionDenied, "node.cluster %q differs from the pod's tier %q (namespace %s, annotation %s)", node.GetCluster(), key, bp.namespace, inject.AnnotationTier)
	}
	return controlplane.Identity{Tier: key, Expires: bp.until}, nil
}

// podTier checks that pod is the pod the token was issued for and an
// injected one, and returns its tier key.
func (a *tokenAuthenticator) podTier(ctx context.Context, bp boundPod, pod *corev1.Pod) (string, error) {
	if pod.UID != bp.uid {
		return "", status.Errorf(codes.PermissionDenied, "pod %s/%s has uid %s, the token was issued for uid %s", bp.namespace, bp.name, pod.UID, bp.uid)
	}
	if pod.Spec.ServiceAccountName != bp.serviceAccount {
		return "", status.Errorf(codes.PermissionDenied, "pod %s/%s runs as ServiceAccount %q, the token is %q's", bp.namespace, bp.name, pod.Spec.ServiceAccountName, bp.serviceAccount)
	}
	// Injection sets both the label (which also puts the pod into the
	// operator's cache, so that its streams do not read the API server)
	// and the annotation; a pod edited by hand since must still agree.
	tier := pod.Annotations[inject.AnnotationTier]
	if tier == "" || pod.Labels[inject.LabelTier] != tier {
		return "", status.Errorf(codes.PermissionDenied, "pod %s/%s is not an injected pod: its label %s (%q) and annotation %s (%q) must name the same tier",
			bp.namespace, bp.name, inject.LabelTier, pod.Labels[inject.LabelTier], inject.AnnotationTier, tier)
	}
	var ct v1alpha1.CacheTier
	switch err := a.objects.Get(ctx, types.NamespacedName{Namespace: bp.namespace, Name: tier}, &ct); {
	case apierrors.IsNotFound(err):
		return "", status.Errorf(codes.PermissionDenied, "pod %s/%s names CacheTier %q, which does not exist in its namespace", bp.namespace, bp.name, tier)
	case err != nil:
		return "", status.Errorf(codes.Unavailable, "reading CacheTier %s/%s: %v", bp.namespace, tier, err)
	}
	return bp.namespace + "/" + tier, nil
}

// pod reads the token's pod from the operator's cache (of injected pods).
func (a *tokenAuthenticator) pod(ctx context.Context, bp boundPod) (*corev1.Pod, error) {
	key := types.NamespacedName{Namespace: bp.namespace, Name: bp.name}
	var pod corev1.Pod
	err := a.objects.Get(ctx, key, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil, status.Errorf(codes.PermissionDenied, "the token's pod %s does not exist", key)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "reading the token's pod %s: %v", key, err)
	}
	return &pod, nil
}

// review returns what the API server says about tok (whose sha256 is h),
// from the cache when it is there. Concurrent reviews of one token share
// one TokenReview.
func (a *tokenAuthenticator) review(ctx context.Context, h [sha256.Size]byte, tok string) (boundPod, *corev1.Pod, error) {
	now := a.now()
	a.mu.Lock()
	r, ok := a.cache[h]
	a.mu.Unlock()
	if ok && now.Before(r.until) {
		return r.pod, nil, r.err
	}
	// Refusals that cost no review are not cached: they are cheaper
	// than a cache entry, and must never push out reviews that cost one.
	c, err := a.prescreen(tok, now)
	if err != nil {
		return boundPod{}, nil, err
	}
	pod, err := a.claimedPod(ctx, c)
	if err != nil {
		return boundPod{}, nil, err
	}
	v, err, _ := a.flight.Do(string(h[:]), func() (any, error) {
		if !a.perPod.allow(pod.UID) || !a.limit.Allow() {
			return nil, status.Errorf(codes.Unavailable, "too many new tokens to review for this pod or at once; retry later")
		}
		r, err := a.tokenReview(ctx, tok)
		if err != nil {
			return nil, err // not cached: the API server may answer next time
		}
		a.remember(h, r)
		return r, nil
	})
	if err != nil {
		return boundPod{}, nil, err
	}
	r = v.(reviewResult)
	return r.pod, pod, r.err
}

// podLimits are the review buckets of pods, by UID.
type podLimits struct {
	mu sync.Mutex
	m  map[types.UID]*rate.Limiter
}

// allow spends one review from the bucket of the pod with uid.
func (l *podLimits) allow(uid types.UID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) >= maxPodBuckets {
		l.m = make(map[types.UID]*rate.Limiter)
	}
	b := l.m[uid]
	if b == nil {
		b = rate.NewLimiter(rate.Every(podReviewEvery), podReviewBurst)
		l.m[uid] = b
	}
	return b.Allow()
}

// prescreen refuses, without asking the API server, a token that cannot
// pass its review: not a JWT, or whose claims (read unverified: the
// review verifies) name another audience, have expired, or bind no pod.
// Only the API server can say a token is good; this only says which are
// certainly bad.
func (a *tokenAuthenticator) prescreen(tok string, now time.Time) (claims, error) {
	c, ok := jwtClaims(tok)
	switch {
	case !ok:
		return c, status.Error(codes.Unauthenticated, "the bearer token is not a ServiceAccount token (not a JWT)")
	case !slices.Contains(c.Aud, a.audience):
		return c, status.Errorf(codes.Unauthenticated, "token is not valid for audience %q", a.audience)
	case c.Exp == nil || !now.Before(time.Unix(*c.Exp, 0)):
		return c, status.Error(codes.Unauthenticated, "token has expired")
	case c.Kubernetes.Namespace == "" || c.Kubernetes.Pod.Name == "" || c.Kubernetes.Pod.UID == "":
		return c, status.Error(codes.Unauthenticated, "token is not bound to a pod: mount a projected serviceAccountToken")
	}
	return c, nil
}

// claimedPod returns the UID of the pod the token claims (unverified)
// when the operator's cache holds that injected pod with that UID; only
// such tokens are worth a review. The API server is not asked: a client
// must not make the operator read pods it names at will.
func (a *tokenAuthenticator) claimedPod(ctx context.Context, c claims) (*corev1.Pod, error) {
	key := types.NamespacedName{Namespace: c.Kubernetes.Namespace, Name: c.Kubernetes.Pod.Name}
	var pod corev1.Pod
	if err := a.objects.Get(ctx, key, &pod); err != nil || string(pod.UID) != c.Kubernetes.Pod.UID {
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, status.Errorf(codes.Unavailable, "reading the token's pod %s: %v", key, err)
		}
		return nil, status.Errorf(codes.PermissionDenied, "the token's pod %s is not an injected pod the operator knows (labelled %s; a pod created a moment ago is known within seconds: retry)", key, inject.LabelTier)
	}
	return &pod, nil
}

// tokenReview asks the API server about tok. err is set only when the API
// server could not answer; a refusal is a result.
func (a *tokenAuthenticator) tokenReview(ctx context.Context, tok string) (reviewResult, error) {
	now := a.now()
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok, Audiences: []string{a.audience}}}
	if err := a.reviews.Create(ctx, tr); err != nil {
		a.counter.WithLabelValues(reviewError).Inc()
		return reviewResult{}, status.Errorf(codes.Unavailable, "token review: %v", err)
	}
	refuse := func(format string, args ...any) (reviewResult, error) {
		a.counter.WithLabelValues(reviewRefused).Inc()
		return reviewResult{err: status.Errorf(codes.Unauthenticated, format, args...), until: now.Add(reviewFailureTTL)}, nil
	}
	st := tr.Status
	if !st.Authenticated {
		reason := st.Error
		if reason == "" {
			reason = "not authenticated"
		}
		return refuse("token refused by the API server for audience %q: %s", a.audience, reason)
	}
	if !slices.Contains(st.Audiences, a.audience) {
		return refuse("token is not valid for audience %q", a.audience)
	}
	ns, sa, ok := strings.Cut(strings.TrimPrefix(st.User.Username, saUserPrefix), ":")
	if !strings.HasPrefix(st.User.Username, saUserPrefix) || !ok || ns == "" || sa == "" {
		return refuse("token is not a ServiceAccount token (user %q)", st.User.Username)
	}
	name, uid := single(st.User.Extra[extraPodName]), single(st.User.Extra[extraPodUID])
	if name == "" || uid == "" {
		return refuse("token of ServiceAccount %s/%s is not bound to a pod: mount a projected serviceAccountToken", ns, sa)
	}
	until := now.Add(reviewMaxAge)
	if exp, ok := jwtExpiry(tok); ok && exp.Before(until) {
		until = exp
	}
	a.counter.WithLabelValues(reviewAuthenticated).Inc()
	return reviewResult{
		pod:   boundPod{namespace: ns, name: name, serviceAccount: sa, uid: types.UID(uid), until: until},
		until: until,
	}, nil
}

// remember caches r under h, keeping the cache within reviewCacheSize:
// expired entries go first, then arbitrary ones.
func (a *tokenAuthenticator) remember(h [sha256.Size]byte, r reviewResult) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= reviewCacheSize {
		now := a.now()
		for k, v := range a.cache {
			if !now.Before(v.until) {
				delete(a.cache, k)
			}
		}
		for k := range a.cache {
			if len(a.cache) < reviewCacheSize {
				break
			}
			delete(a.cache, k)
		}
	}
	a.cache[h] = r
}

func single(v authnv1.ExtraValue) string {
	if len(v) != 1 {
		return ""
	}
	return v[0]
}

// claims are the parts of a ServiceAccount token's payload the
// authenticator looks at before a review, read without verifying
// anything.
type claims struct {
	Aud        audiences `json:"aud"`
	Exp        *int64    `json:"exp"`
	Kubernetes struct {
		Namespace string `json:"namespace"`
		Pod       struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// audiences is a JWT "aud": one string or a list of them.
type audiences []string

func (a *audiences) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audiences{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// jwtClaims decodes the payload of a JWT without verifying it.
func jwtClaims(tok string) (claims, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return claims{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return claims{}, false
	}
	var c claims
	if err := json.Unmarshal(payload, &c); err != nil {
		return claims{}, false
	}
	return c, true
}

// jwtExpiry reads the exp claim of a JWT without verifying anything: the
// API server has verified the token; exp only bounds how long its review
// is reused.
func jwtExpiry(tok string) (time.Time, bool) {
	c, ok := jwtClaims(tok)
	if !ok || c.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(*c.Exp, 0), true
}
