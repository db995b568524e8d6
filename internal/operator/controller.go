package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/operator/render"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// secretRefIndex indexes CacheTiers by the names of the Secrets they
// reference, so a Secret change finds its tiers without a scan.
const secretRefIndex = "tiercache.io/secret-refs"

// Publisher delivers a tier's rendered config to its sidecars: the xDS
// control plane. Key is "<namespace>/<tier>".
type Publisher interface {
	Publish(ctx context.Context, key string, c tierconfig.Config) error
	Clear(key string)
	Connected(key string) int
}

// NoPublisher is the Publisher of an operator without a control plane:
// sidecars run on the config placed in their pod spec at admission.
type NoPublisher struct{}

func (NoPublisher) Publish(context.Context, string, tierconfig.Config) error { return nil }
func (NoPublisher) Clear(string)                                             {}
func (NoPublisher) Connected(string) int                                     { return 0 }

// TierReconciler renders each CacheTier (its Secrets by resourceVersion,
// never by value), publishes the result and reports it in status:
// conditions Valid and Ready (see readiness: every injected pod connected,
// current, and mounting the Secrets the tier names), observedGeneration,
// config hash, L2 mode, injected pods and connected sidecars. It creates the tier's generated
// Secret (<tier>-tiercache: purge token, invalidation key) when missing;
// the Secret is owned by the tier and garbage collected with it, so there
// is no finalizer: a deleted tier is only cleared from the publisher.
type TierReconciler struct {
	// Client's cache holds only Secrets labelled
	// tiercache.io/allow-reference=true, by metadata.
	Client client.Client
	// APIReader reads the metadata of a Secret that blocks the generated
	// Secret's name (the cache does not hold an unlabelled one).
	APIReader client.Reader
	// Random feeds the generated Secrets; nil = crypto/rand.
	Random    io.Reader
	Events    events.EventRecorder
	Publisher Publisher
	// Refresh re-reconciles each tier this often, so that an expired
	// report stops counting (0: only on changes).
	Refresh time.Duration
	// SidecarImage is the image pods are injected with unless a tier
	// names its own (--sidecar-image): SidecarImagesMatch compares the
	// pods' with it ("": the condition is not set).
	SidecarImage string
	// Sidecars adds up a tier's sidecars over every replica's report; nil
	// (no control plane) counts the Publisher's connected sidecars, and
	// Ready then only says the config is published.
	Sidecars func(ctx context.Context, key string) (sidecarTally, error)
	// Relay: the operator serves the control plane, whose invalidation
	// relay carries the purges of tiers without L2 to every pod
	// (PurgesReachEveryPod).
	Relay bool
}

// Reconcile implements reconcile.Reconciler.
func (r *TierReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.Namespace + "/" + req.Name
	tier, err := liveTier(ctx, r.Client, req, r.Publisher)
	if tier == nil || err != nil {
		return reconcile.Result{}, err
	}

	status := tier.Status.DeepCopy()
	status.ObservedGeneration = tier.Generation
	gen := tier.Generation
	var requeueErr error

	lookup := secretLookup{cache: r.Client}
	made, err := ensureGeneratedSecret(ctx, r.Client, r.APIReader, tier, r.Random)
	if err != nil {
		return reconcile.Result{}, err
	}
	if made != nil {
		lookup.known = map[string]metav1.Object{made.GetName(): made}
	}
	cfg, err := render.Config(ctx, tier, lookup)
	switch ses := render.SecretErrors(err); {
	case err == nil:
		setCondition(status, gen, v1alpha1.ConditionValid, metav1.ConditionTrue, v1alpha1.ReasonRendered, "the spec renders to a valid sidecar config")
	case render.Transient(err):
		// Reading a Secret failed for another reason: retry, keep the
		// status as it was.
		return reconcile.Result{}, err
	case len(ses) > 0:
		reason := v1alpha1.ReasonSecretMissing
		msgs := make([]string, len(ses))
		for i, se := range ses {
			if errors.Is(se, render.ErrNotGenerated) {
				reason = v1alpha1.ReasonSecretConflict
			}
			msgs[i] = se.Error()
		}
		setCondition(status, gen, v1alpha1.ConditionValid, metav1.ConditionFalse, reason, strings.Join(msgs, "; "))
	default:
		setCondition(status, gen, v1alpha1.ConditionValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, render.FieldErrors(err).ToAggregate().Error())
	}

	var pods corev1.PodList
	if lerr := r.Client.List(ctx, &pods, client.InNamespace(tier.Namespace), client.MatchingLabels{inject.LabelTier: tier.Name}); lerr != nil {
		return reconcile.Result{}, lerr
	}
	live := make([]*corev1.Pod, 0, len(pods.Items))
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp.IsZero() && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live = append(live, p)
		}
	}
	status.InjectedPods = int32(len(live))
	var svcs corev1.ServiceList
	if lerr := r.Client.List(ctx, &svcs, client.InNamespace(tier.Namespace)); lerr != nil {
		return reconcile.Result{}, lerr
	}
	bypass := servicesBypassing(svcs.Items, live)
	if !tier.Spec.Sidecar.FrontHTTP2 {
		bypass = append(bypass, servicesDeclaringHTTP2(svcs.Items, live)...)
	}
	if ok, reason, msg := servicesRouted(bypass); ok {
		setCondition(status, gen, v1alpha1.ConditionServicesRouted, metav1.ConditionTrue, reason, msg)
	} else {
		setCondition(status, gen, v1alpha1.ConditionServicesRouted, metav1.ConditionFalse, reason, msg)
	}

	if want := cmp.Or(tier.Spec.Sidecar.Image, r.SidecarImage); want != "" {
		st, reason, msg := sidecarImages(want, live)
		setCondition(status, gen, v1alpha1.ConditionSidecarImagesMatch, st, reason, msg)
	}

	var perr error
	var restart []podRestart
	if err == nil {
		st, reason, msg := purgesReach(len(cfg.L2.Addresses) > 0, r.Relay, len(live))
		setCondition(status, gen, v1alpha1.ConditionPurgesReachEveryPod, st, reason, msg)
		restart = restartsNeeded(live, secretFilesToProject(tier, cfg.SecretVersions))
		status.ConfigHash = cfg.Hash()
		status.L2Mode = "none"
		if len(cfg.L2.Addresses) > 0 {
			status.L2Mode = cfg.L2.Mode
		}
		perr = r.Publisher.Publish(ctx, key, cfg)
	}
	// The sidecars are counted against the config in effect: the new one,
	// or while the spec is not valid the last valid one, which they keep.
	if r.Sidecars != nil {
		tally, terr := r.Sidecars(ctx, key)
		if terr != nil {
			return reconcile.Result{}, terr
		}
		counts := sidecarCounts(tally, status.ConfigHash)
		status.Sidecars = &counts
		status.NACKs, status.LastNACK = int64(tally.NACKs), ""
		if tally.LastNACK != nil {
			status.LastNACK = truncate(tally.LastNACK.String(), 1024)
		}
	} else {
		n := int32(r.Publisher.Connected(key))
		status.Sidecars = &v1alpha1.SidecarCounts{Total: n, Behind: n}
	}
	status.ConnectedSidecars = status.Sidecars.Total

	switch v := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionValid); {
	case err == nil:
		if perr != nil {
			setCondition(status, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPublishFailed, perr.Error())
			requeueErr = perr
		} else if r.Sidecars == nil {
			setCondition(status, gen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, "the rendered config is published; no control plane counts the sidecars that apply it")
		} else {
			st, reason, msg := readiness(*status.Sidecars, status.InjectedPods, restart, status.ConfigHash, status.LastNACK)
			setCondition(status, gen, v1alpha1.ConditionReady, st, reason, msg)
		}
	case v.Reason != v1alpha1.ReasonInvalidSpec:
		// A Secret problem: say how to fix it here too.
		setCondition(status, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, v.Reason, v.Message+"; sidecars keep their last valid config")
	default:
		// Sidecars keep the last config that was valid; say so.
		setCondition(status, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNotValid, "the spec is not valid; sidecars keep their last valid config")
	}

	if !equality.Semantic.DeepEqual(status, &tier.Status) {
		r.emitTransitions(tier, status)
		r.warnServices(tier, status, bypass)
		patch := client.MergeFrom(tier.DeepCopy())
		tier.Status = *status
		if serr := r.Client.Status().Patch(ctx, tier, patch); serr != nil {
			return reconcile.Result{}, serr
		}
	}
	if requeueErr != nil {
		return reconcile.Result{}, requeueErr // retried with backoff
	}
	// A report that expires changes nothing the leader watches: look
	// again in a while.
	return reconcile.Result{RequeueAfter: r.Refresh}, nil
}

// liveTier returns the tier req names, or nil when it is gone or being
// deleted, after withdrawing its config from pub.
func liveTier(ctx context.Context, c client.Reader, req reconcile.Request, pub Publisher) (*v1alpha1.CacheTier, error) {
	var tier v1alpha1.CacheTier
	err := c.Get(ctx, req.NamespacedName, &tier)
	if apierrors.IsNotFound(err) || (err == nil && !tier.DeletionTimestamp.IsZero()) {
		pub.Clear(req.Namespace + "/" + req.Name)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &tier, nil
}

// emitTransitions records an Event when Valid changes or its message
// does, and when Ready's status or reason changes (its message carries
// sidecar counts, which move with every rollout), so `kubectl describe
// ct` tells the story. Sidecars still applying a new version, and new
// pods whose sidecars have not connected yet, are the normal course of a
// change or a rollout: Normal Events.
func (r *TierReconciler) emitTransitions(tier *v1alpha1.CacheTier, next *v1alpha1.CacheTierStatus) {
	if r.Events == nil {
		return
	}
	for _, t := range []string{v1alpha1.ConditionValid, v1alpha1.ConditionReady, v1alpha1.ConditionServicesRouted,
		v1alpha1.ConditionPurgesReachEveryPod, v1alpha1.ConditionSidecarImagesMatch} {
		now := meta.FindStatusCondition(next.Conditions, t)
		before := meta.FindStatusCondition(tier.Status.Conditions, t)
		if now == nil || (before != nil && before.Status == now.Status && before.Reason == now.Reason &&
			(t == v1alpha1.ConditionReady || before.Message == now.Message)) {
			continue
		}
		if t != v1alpha1.ConditionValid && t != v1alpha1.ConditionReady && before == nil && now.Status == metav1.ConditionTrue {
			continue // nothing to tell
		}
		kind := corev1.EventTypeNormal
		if now.Status != metav1.ConditionTrue && now.Reason != v1alpha1.ReasonSidecarsBehind && now.Reason != v1alpha1.ReasonSidecarsNotConnected {
			kind = corev1.EventTypeWarning
		}
		r.Events.Eventf(tier, nil, kind, now.Reason, "Reconcile", "%s", now.Message)
	}
}

// warnServices records a Warning Event on each Service that goes around
// the sidecar, when the ServicesRouted condition turns False or names
// other ports: `kubectl describe svc` is where a user looks.
func (r *TierReconciler) warnServices(tier *v1alpha1.CacheTier, next *v1alpha1.CacheTierStatus, bypass []serviceBypass) {
	now := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionServicesRouted)
	before := meta.FindStatusCondition(tier.Status.Conditions, v1alpha1.ConditionServicesRouted)
	if r.Events == nil || now == nil || now.Status != metav1.ConditionFalse || (before != nil && before.Status == now.Status && before.Message == now.Message) {
		return
	}
	for _, b := range bypass {
		r.Events.Eventf(b.Service, tier, corev1.EventTypeWarning, b.reason(), "Reconcile", "%s (pods of CacheTier %s)", b.String(), tier.Name)
	}
}

func setCondition(s *v1alpha1.CacheTierStatus, gen int64, t string, st metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: t, Status: st, Reason: reason, Message: truncate(msg, 1024), ObservedGeneration: gen,
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// secretRefs lists the Secret names a tier references, and its generated
// Secret.
func secretRefs(t *v1alpha1.CacheTier) []string {
	var out []string
	add := func(r *corev1.SecretKeySelector) {
		if r != nil && r.Name != "" {
			out = append(out, r.Name)
		}
	}
	if l2 := t.Spec.L2; l2 != nil {
		add(l2.PasswordSecretRef)
		if l2.TLS != nil {
			add(l2.TLS.CASecretRef)
		}
	}
	add(t.Spec.Purge.TokenSecretRef)
	return append(out, inject.GeneratedSecretName(t.Name))
}

// indexSecretRefs indexes CacheTiers by the Secrets they reference and
// returns the handler that maps a Secret to the tiers that use it.
func indexSecretRefs(ctx context.Context, mgr ctrl.Manager) (handler.EventHandler, error) {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.CacheTier{}, secretRefIndex, func(o client.Object) []string {
		return secretRefs(o.(*v1alpha1.CacheTier))
	}); err != nil {
		return nil, fmt.Errorf("index CacheTier secret references: %w", err)
	}
	c := mgr.GetClient()
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var tiers v1alpha1.CacheTierList
		if err := c.List(ctx, &tiers, client.InNamespace(o.GetNamespace()), client.MatchingFields{secretRefIndex: o.GetName()}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(tiers.Items))
		for _, t := range tiers.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
		}
		return reqs
	}), nil
}

// SetupWithManager registers the status controller (leader only):
// CacheTiers, the Secrets they reference and their generated Secrets
// (metadata only, and only labelled ones: see newManager), injected Pods
// (by their tier label; the manager's cache holds only Pods that carry
// it), Services (every tier of their namespace: ServicesRouted), and,
// with a control plane, the replicas' sidecar reports (the
// tiers a report's change touches).
func (r *TierReconciler) SetupWithManager(mgr ctrl.Manager, secretToTiers handler.EventHandler, reports *sidecarReports) error {
	podToTier := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[inject.LabelTier]
		if name == "" || strings.Contains(name, "/") {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("cachetier").
		For(&v1alpha1.CacheTier{}).
		Watches(&corev1.Secret{}, secretToTiers, builder.OnlyMetadata).
		Watches(&corev1.Pod{}, podToTier).
		Watches(&corev1.Service{}, serviceToTiers(mgr.GetClient()))
	if reports != nil {
		b = b.Watches(&coordinationv1.Lease{}, reports.handler())
	}
	return b.Complete(r)
}

// serviceToTiers maps a Service to the tiers of its namespace: which
// pods it selects is the reconcile's to find out.
func serviceToTiers(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var tiers v1alpha1.CacheTierList
		if err := c.List(ctx, &tiers, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(tiers.Items))
		for _, t := range tiers.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
		}
		return reqs
	})
}
