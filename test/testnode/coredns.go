package testnode

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// corefile: the cluster's names only; there is nothing to forward to.
const corefile = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes ` + ClusterDomain + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
    loadbalance
    reload
}
`

// startCoreDNS runs CoreDNS as a one-replica Deployment behind the kube-dns
// Service at DNSServiceIP and waits until it answers a name through that
// Service: Ready alone is not enough (a client right after it timed out
// once in the trial).
func (n *Node) startCoreDNS(ctx context.Context) error {
	if err := n.waitServiceAccount(ctx, metav1.NamespaceSystem); err != nil {
		return err
	}
	ns := metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": "kube-dns"}
	meta := metav1.ObjectMeta{Name: "coredns", Namespace: ns, Labels: labels}
	c := n.client
	steps := []func() error{
		func() error {
			_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "tiercache-node:coredns"},
				Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
					{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "tiercache-node:coredns"},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tiercache-node:coredns"},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "coredns", Namespace: ns}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"Corefile": corefile}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().Services(ns).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: labels},
				Spec: corev1.ServiceSpec{
					Selector:  labels,
					ClusterIP: DNSServiceIP.String(),
					Ports: []corev1.ServicePort{
						{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
						{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.AppsV1().Deployments(ns).Create(ctx, corednsDeployment(meta, labels), metav1.CreateOptions{})
			return err
		},
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	name := "kubernetes.default.svc." + ClusterDomain
	return poll(ctx, readyTimeout, "CoreDNS to answer "+name, nil, func(ctx context.Context) (bool, error) {
		addrs, err := n.Resolver().LookupHost(ctx, name)
		if err != nil {
			return false, err
		}
		return slices.Contains(addrs, APIServiceIP.String()), fmt.Errorf("%s is %v, want %s", name, addrs, APIServiceIP)
	})
}

func corednsDeployment(meta metav1.ObjectMeta, labels map[string]string) *appsv1.Deployment {
	probe := func(path string, port int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}},
			PeriodSeconds: 1,
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "coredns",
					DNSPolicy:          corev1.DNSDefault,
					Containers: []corev1.Container{{
						Name:            "coredns",
						Image:           corednsImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
						},
						VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						LivenessProbe:  probe("/health", 8080),
						ReadinessProbe: probe("/ready", 8181),
					}},
					Volumes: []corev1.Volume{{
						Name: "config",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: meta.Name},
						}},
					}},
				},
			},
		},
	}
}

// waitServiceAccount waits for the controller-manager to make a
// namespace's default ServiceAccount: pods are refused until it exists.
func (n *Node) waitServiceAccount(ctx context.Context, ns string) error {
	return poll(ctx, componentTimeout, "the default ServiceAccount in "+ns, nil, func(ctx context.Context) (bool, error) {
		_, err := n.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}
