package main

// The rules of transcript-owner's deployment, beyond what the API types themselves enforce.
// Each one stands for a failure that a cluster would accept silently and the worker would
// not survive (or would survive badly): see deploy/k8s/README.md.

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The worker's defaults (workers/settings.py), used when the manifests leave a variable unset.
const (
	defaultShutdownTimeoutS = 30.0
	defaultPartitions       = 8
	defaultStateDir         = "var/state"
	defaultSecurityProtocol = "PLAINTEXT"
	// A liveness probe must tolerate this long without an answer: a rebalance or a restore
	// keeps the worker busy, and a restart then only starts the restore again.
	minLivenessWindowS = 60
	readyPath          = "/readyz"
	livePath           = "/livez"
)

// podTemplate is a pod spec inside a workload, with the names its messages use.
type podTemplate struct {
	owner  *object
	field  string // JSON path of the PodSpec
	spec   *corev1.PodSpec
	labels map[string]string
}

type index struct {
	configMaps map[string]*corev1.ConfigMap // "namespace/name"
	secrets    map[string]*corev1.Secret
	services   map[string]*corev1.Service
	// Secrets referenced but not in the stream: "namespace/name" -> key -> true
	expected map[string]map[string]bool
}

func key(namespace, name string) string { return namespace + "/" + name }

func checkRules(objects []*object, production bool, p *problems) []string {
	idx := &index{
		configMaps: map[string]*corev1.ConfigMap{},
		secrets:    map[string]*corev1.Secret{},
		services:   map[string]*corev1.Service{},
		expected:   map[string]map[string]bool{},
	}
	var templates []podTemplate
	for _, o := range objects {
		switch v := o.value.(type) {
		case *corev1.ConfigMap:
			idx.configMaps[key(o.namespace, o.name)] = v
		case *corev1.Secret:
			idx.secrets[key(o.namespace, o.name)] = v
		case *corev1.Service:
			idx.services[key(o.namespace, o.name)] = v
		case *appsv1.StatefulSet:
			templates = append(templates, podTemplate{o, "spec.template.spec", &v.Spec.Template.Spec,
				v.Spec.Template.Labels})
		case *appsv1.Deployment:
			templates = append(templates, podTemplate{o, "spec.template.spec", &v.Spec.Template.Spec,
				v.Spec.Template.Labels})
		case *batchv1.Job:
			templates = append(templates, podTemplate{o, "spec.template.spec", &v.Spec.Template.Spec,
				v.Spec.Template.Labels})
		}
	}
	for _, o := range objects {
		switch v := o.value.(type) {
		case *corev1.ConfigMap:
			checkConfigMap(o, v, p)
		case *corev1.Secret:
			if production && (len(v.Data) > 0 || len(v.StringData) > 0) {
				p.add(o.String(), "data", "a production Secret is created by the operator, "+
					"never rendered from the manifests (reference it by name instead)")
			}
		case *appsv1.StatefulSet:
			checkStatefulSet(o, v, idx, p)
			checkAdmitted(o, v, objects, p)
		case *corev1.Service:
			if len(v.Spec.Selector) > 0 {
				checkSelects(o, "spec.selector", labels.SelectorFromSet(v.Spec.Selector), templates, p)
			}
		case *policyv1.PodDisruptionBudget:
			checkSelector(o, v.Spec.Selector, templates, p)
		case *networkingv1.NetworkPolicy:
			checkNetworkPolicy(o, v, templates, p)
		}
	}
	for _, t := range templates {
		checkPodTemplate(t, idx, production, p)
	}
	var lines []string
	for name, keys := range idx.expected {
		var list []string
		for k := range keys {
			list = append(list, k)
		}
		sort.Strings(list)
		lines = append(lines, fmt.Sprintf("expects Secret %s (keys: %s)", name, strings.Join(list, ", ")))
	}
	sort.Strings(lines)
	return lines
}

func checkConfigMap(o *object, cm *corev1.ConfigMap, p *problems) {
	for k := range cm.Data {
		upper := strings.ToUpper(k)
		if strings.Contains(upper, "PASSWORD") || strings.Contains(upper, "SECRET") {
			p.add(o.String(), "data."+k, "a credential in a ConfigMap: put it in a Secret")
		}
	}
}

func checkSelector(o *object, sel *metav1.LabelSelector, templates []podTemplate, p *problems) {
	if sel == nil {
		p.add(o.String(), "spec.selector", "required")
		return
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		p.add(o.String(), "spec.selector", "%v", err)
		return
	}
	checkSelects(o, "spec.selector", selector, templates, p)
}

// checkSelects: a Service or PodDisruptionBudget that selects no pod of the manifests is a typo.
func checkSelects(o *object, field string, sel labels.Selector, templates []podTemplate, p *problems) {
	for _, t := range templates {
		if t.owner.namespace == o.namespace && sel.Matches(labels.Set(t.labels)) {
			return
		}
	}
	p.add(o.String(), field, "selects the pods of no workload in the manifests (%s)", sel)
}

// ---- pod templates (StatefulSet, Deployment, Job) ----

func checkPodTemplate(t podTemplate, idx *index, production bool, p *problems) {
	who := t.owner.String()
	all := func(visit func(field string, c *corev1.Container)) {
		for i := range t.spec.InitContainers {
			c := &t.spec.InitContainers[i]
			visit(fmt.Sprintf("%s.initContainers[%s]", t.field, c.Name), c)
		}
		for i := range t.spec.Containers {
			c := &t.spec.Containers[i]
			visit(fmt.Sprintf("%s.containers[%s]", t.field, c.Name), c)
		}
	}
	if len(t.spec.Containers) == 0 {
		p.add(who, t.field+".containers", "no container")
	}
	all(func(field string, c *corev1.Container) {
		checkResources(who, field, c, p)
		checkEnv(who, field, c, t, idx, p)
		checkReferences(who, field, c, t, idx, p)
		if production {
			checkImagePinned(who, field, c.Image, p)
		}
	})
	for _, v := range t.spec.Volumes {
		field := fmt.Sprintf("%s.volumes[%s]", t.field, v.Name)
		if v.Secret != nil {
			var keys []string
			for _, item := range v.Secret.Items {
				keys = append(keys, item.Key)
			}
			idx.needSecret(who, field+".secret", t.owner.namespace, v.Secret.SecretName, keys,
				v.Secret.Optional, p)
		}
		if v.ConfigMap != nil {
			var keys []string
			for _, item := range v.ConfigMap.Items {
				keys = append(keys, item.Key)
			}
			idx.needConfigMap(who, field+".configMap", t.owner.namespace, v.ConfigMap.Name, keys,
				v.ConfigMap.Optional, p)
		}
	}
}

func checkResources(who, field string, c *corev1.Container, p *problems) {
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[r]
		lim, hasLim := c.Resources.Limits[r]
		if !hasReq {
			p.add(who, fmt.Sprintf("%s.resources.requests.%s", field, r), "missing")
		}
		if !hasLim {
			p.add(who, fmt.Sprintf("%s.resources.limits.%s", field, r), "missing")
		}
		if hasReq && hasLim && req.Cmp(lim) > 0 {
			p.add(who, fmt.Sprintf("%s.resources.requests.%s", field, r),
				"%s is above the limit %s", req.String(), lim.String())
		}
	}
}

func checkImagePinned(who, field, image string, p *problems) {
	if strings.Contains(image, "@sha256:") {
		return
	}
	name := image[strings.LastIndex(image, "/")+1:]
	tag := ""
	if i := strings.LastIndex(name, ":"); i >= 0 {
		tag = name[i+1:]
	}
	if tag == "" || tag == "latest" {
		p.add(who, field+".image", "%q is not pinned: give a version tag or a digest", image)
	}
}

// envValue is where a container's variable comes from, after Kubernetes' precedence: env over
// envFrom, and a later entry over an earlier one.
type envValue struct {
	set      bool
	known    bool   // the value is known (a literal, or from a ConfigMap in the stream)
	value    string // when known
	from     string // for messages
	fieldRef string // valueFrom.fieldRef.fieldPath, if that is the source
	secret   bool   // from a Secret
}

func (idx *index) resolve(c *corev1.Container, namespace, name string) envValue {
	var got envValue
	for _, from := range c.EnvFrom {
		if !strings.HasPrefix(name, from.Prefix) {
			continue
		}
		k := strings.TrimPrefix(name, from.Prefix)
		if from.ConfigMapRef != nil {
			if cm := idx.configMaps[key(namespace, from.ConfigMapRef.Name)]; cm != nil {
				if v, ok := cm.Data[k]; ok {
					got = envValue{set: true, known: true, value: v,
						from: "ConfigMap " + from.ConfigMapRef.Name}
				}
			}
		}
		if from.SecretRef != nil {
			if s := idx.secrets[key(namespace, from.SecretRef.Name)]; s != nil {
				if _, ok := s.Data[k]; ok {
					got = envValue{set: true, from: "Secret " + from.SecretRef.Name, secret: true}
				}
				if _, ok := s.StringData[k]; ok {
					got = envValue{set: true, from: "Secret " + from.SecretRef.Name, secret: true}
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		switch {
		case e.ValueFrom == nil:
			got = envValue{set: true, known: true, value: e.Value, from: "value"}
		case e.ValueFrom.FieldRef != nil:
			got = envValue{set: true, from: "fieldRef", fieldRef: e.ValueFrom.FieldRef.FieldPath}
		case e.ValueFrom.SecretKeyRef != nil:
			got = envValue{set: true, from: "Secret " + e.ValueFrom.SecretKeyRef.Name, secret: true}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			got = envValue{set: true, from: "ConfigMap " + ref.Name}
			if cm := idx.configMaps[key(namespace, ref.Name)]; cm != nil {
				if v, ok := cm.Data[ref.Key]; ok {
					got.known, got.value = true, v
				}
			}
		default:
			got = envValue{set: true, from: "resourceFieldRef"}
		}
	}
	// the worker treats an empty variable as unset (workers/settings.py)
	if got.known && got.value == "" {
		return envValue{}
	}
	return got
}

func checkEnv(who, field string, c *corev1.Container, t podTemplate, idx *index, p *problems) {
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			p.add(who, fmt.Sprintf("%s.env[%s]", field, e.Name), "declared twice (the last one wins)")
		}
		seen[e.Name] = true
		if strings.Contains(strings.ToUpper(e.Name), "PASSWORD") &&
			(e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			p.add(who, fmt.Sprintf("%s.env[%s]", field, e.Name), "must come from a Secret (secretKeyRef)")
		}
	}
	ns := t.owner.namespace
	protocol := defaultSecurityProtocol
	if v := idx.resolve(c, ns, "KAFKA_SECURITY_PROTOCOL"); v.known {
		protocol = v.value
	}
	if strings.HasPrefix(protocol, "SASL") {
		for _, name := range []string{"KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"} {
			if !idx.resolve(c, ns, name).set {
				p.add(who, fmt.Sprintf("%s.env[%s]", field, name),
					"required with KAFKA_SECURITY_PROTOCOL=%s", protocol)
			}
		}
	}
	if v := idx.resolve(c, ns, "KAFKA_SSL_CAFILE"); v.known {
		if m := mountOf(c, v.value); m == nil {
			p.add(who, fmt.Sprintf("%s.env[KAFKA_SSL_CAFILE]", field),
				"%s is on no volume mounted in the container (mount the CA Secret there)", v.value)
		}
	}
}

// mountOf returns the volume mount holding file (a path at or below its mountPath).
func mountOf(c *corev1.Container, file string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	clean := path.Clean(file)
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		dir := path.Clean(m.MountPath)
		if clean == dir || strings.HasPrefix(clean, strings.TrimSuffix(dir, "/")+"/") {
			if best == nil || len(dir) > len(path.Clean(best.MountPath)) {
				best = m
			}
		}
	}
	return best
}

// checkReferences: ConfigMaps come with the manifests, so each one referenced must be there
// with its keys; a Secret in the stream must have the keys asked of it, and one that is not
// is listed as expected (production: the operator creates them).
func checkReferences(who, field string, c *corev1.Container, t podTemplate, idx *index, p *problems) {
	ns := t.owner.namespace
	for i, from := range c.EnvFrom {
		f := fmt.Sprintf("%s.envFrom[%d]", field, i)
		if from.ConfigMapRef != nil {
			idx.needConfigMap(who, f+".configMapRef", ns, from.ConfigMapRef.Name, nil,
				from.ConfigMapRef.Optional, p)
		}
		if from.SecretRef != nil {
			idx.needSecret(who, f+".secretRef", ns, from.SecretRef.Name, nil, from.SecretRef.Optional, p)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		f := fmt.Sprintf("%s.env[%s].valueFrom", field, e.Name)
		if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
			idx.needConfigMap(who, f+".configMapKeyRef", ns, ref.Name, []string{ref.Key}, ref.Optional, p)
		}
		if ref := e.ValueFrom.SecretKeyRef; ref != nil {
			idx.needSecret(who, f+".secretKeyRef", ns, ref.Name, []string{ref.Key}, ref.Optional, p)
		}
	}
}

func (idx *index) needConfigMap(who, field, ns, name string, keys []string, optional *bool, p *problems) {
	cm := idx.configMaps[key(ns, name)]
	if cm == nil {
		if optional == nil || !*optional {
			p.add(who, field, "ConfigMap %s is not in the manifests", name)
		}
		return
	}
	for _, k := range keys {
		_, inData := cm.Data[k]
		_, inBinary := cm.BinaryData[k]
		if !inData && !inBinary {
			p.add(who, field, "ConfigMap %s has no key %q", name, k)
		}
	}
}

func (idx *index) needSecret(who, field, ns, name string, keys []string, optional *bool, p *problems) {
	s := idx.secrets[key(ns, name)]
	if s == nil {
		want := idx.expected[key(ns, name)]
		if want == nil {
			want = map[string]bool{}
			idx.expected[key(ns, name)] = want
		}
		for _, k := range keys {
			want[k] = true
		}
		return
	}
	for _, k := range keys {
		_, inData := s.Data[k]
		_, inString := s.StringData[k]
		if !inData && !inString {
			p.add(who, field, "Secret %s has no key %q", name, k)
		}
	}
}

// ---- the worker's StatefulSet ----

func checkStatefulSet(o *object, sts *appsv1.StatefulSet, idx *index, p *problems) {
	who := o.String()
	spec := &sts.Spec.Template.Spec
	if svc := idx.services[key(o.namespace, sts.Spec.ServiceName)]; svc == nil {
		p.add(who, "spec.serviceName", "no Service %q in the manifests", sts.Spec.ServiceName)
	} else if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		p.add(who, "spec.serviceName", "Service %q is not headless (clusterIP: None)", sts.Spec.ServiceName)
	}
	claims := map[string]bool{}
	for _, claim := range sts.Spec.VolumeClaimTemplates {
		claims[claim.Name] = true
	}
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		field := fmt.Sprintf("spec.template.spec.containers[%s]", c.Name)
		checkProbes(who, field, c, p)

		timeout := defaultShutdownTimeoutS
		if v := idx.resolve(c, o.namespace, "TRANSCRIPT_SHUTDOWN_TIMEOUT_S"); v.known {
			parsed, err := strconv.ParseFloat(v.value, 64)
			if err != nil {
				p.add(who, field+".env[TRANSCRIPT_SHUTDOWN_TIMEOUT_S]", "%q is not a number", v.value)
			} else {
				timeout = parsed
			}
		}
		grace := spec.TerminationGracePeriodSeconds
		switch {
		case grace == nil:
			p.add(who, "spec.template.spec.terminationGracePeriodSeconds",
				"not set (the default 30 s is not above TRANSCRIPT_SHUTDOWN_TIMEOUT_S=%g): set it explicitly",
				timeout)
		case float64(*grace) <= timeout:
			p.add(who, "spec.template.spec.terminationGracePeriodSeconds",
				"%d is not above TRANSCRIPT_SHUTDOWN_TIMEOUT_S=%g: the kubelet would kill the worker "+
					"before it has finished its batch", *grace, timeout)
		}

		if v := idx.resolve(c, o.namespace, "TRANSCRIPT_INSTANCE_ID"); !v.set {
			p.add(who, field+".env[TRANSCRIPT_INSTANCE_ID]",
				"missing: static membership needs valueFrom.fieldRef.fieldPath metadata.name")
		} else if v.fieldRef != "metadata.name" {
			p.add(who, field+".env[TRANSCRIPT_INSTANCE_ID]",
				"comes from %s, not from the pod name (valueFrom.fieldRef.fieldPath metadata.name): "+
					"two pods with one group.instance.id fence each other", describe(v))
		}

		partitions := defaultPartitions
		if v := idx.resolve(c, o.namespace, "TRANSCRIPT_PARTITIONS"); v.known {
			parsed, err := strconv.Atoi(v.value)
			if err != nil || parsed < 1 {
				p.add(who, field+".env[TRANSCRIPT_PARTITIONS]", "%q is not a partition count", v.value)
			} else {
				partitions = parsed
			}
		}
		if int(replicas) > partitions {
			p.add(who, "spec.replicas", "%d replicas for %d partitions: %d of the pods would own no partition",
				replicas, partitions, int(replicas)-partitions)
		}

		stateDir := defaultStateDir
		if v := idx.resolve(c, o.namespace, "TRANSCRIPT_STATE_DIR"); v.known {
			stateDir = v.value
		}
		if !path.IsAbs(stateDir) {
			p.add(who, field+".env[TRANSCRIPT_STATE_DIR]", "%q is not an absolute path on the state volume",
				stateDir)
		} else if m := mountOf(c, stateDir); m == nil || !claims[m.Name] {
			p.add(who, field+".env[TRANSCRIPT_STATE_DIR]",
				"%s is on no volume of spec.volumeClaimTemplates: the state would not survive a restart",
				stateDir)
		} else if m.ReadOnly {
			p.add(who, field+".volumeMounts["+m.Name+"]", "the state volume is mounted read-only")
		}
	}
}

func describe(v envValue) string {
	if v.fieldRef != "" {
		return "fieldRef " + v.fieldRef
	}
	if v.known {
		return fmt.Sprintf("%s (%q)", v.from, v.value)
	}
	return v.from
}

func checkProbes(who, field string, c *corev1.Container, p *problems) {
	check := func(name string, probe *corev1.Probe, wantPath string) {
		f := field + "." + name
		if probe == nil {
			if wantPath != "" {
				p.add(who, f, "missing (httpGet %s)", wantPath)
			}
			return
		}
		if probe.HTTPGet == nil {
			p.add(who, f, "not an httpGet probe")
			return
		}
		if wantPath != "" && probe.HTTPGet.Path != wantPath {
			p.add(who, f+".httpGet.path", "%q, expected %q", probe.HTTPGet.Path, wantPath)
		}
		if !declaresPort(c, probe.HTTPGet.Port) {
			p.add(who, f+".httpGet.port", "%s is not a port of the container (ports[].name or containerPort)",
				probe.HTTPGet.Port.String())
		}
	}
	check("readinessProbe", c.ReadinessProbe, readyPath)
	check("livenessProbe", c.LivenessProbe, livePath)
	check("startupProbe", c.StartupProbe, "")
	if lp := c.LivenessProbe; lp != nil {
		period, threshold := lp.PeriodSeconds, lp.FailureThreshold
		if period == 0 {
			period = 10
		}
		if threshold == 0 {
			threshold = 3
		}
		if period*threshold < minLivenessWindowS {
			p.add(who, field+".livenessProbe",
				"periodSeconds*failureThreshold is %d s: under %d s a rebalance or a restore gets the worker killed",
				period*threshold, minLivenessWindowS)
		}
	}
}

func declaresPort(c *corev1.Container, port intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if port.Type == intstr.String && cp.Name == port.StrVal {
			return true
		}
		if port.Type == intstr.Int && cp.ContainerPort == port.IntVal {
			return true
		}
	}
	return false
}

// ---- NetworkPolicy: who may reach the worker's HTTP port ----

// checkNetworkPolicy: it selects pods of the manifests; every port it admits is one those pods
// declare (a misspelt name admits nothing there: Prometheus would scrape nothing, silently);
// and every ingress rule names its sources (a rule without `from`, or a peer of every pod in
// every namespace, admits anyone who can reach the pod: the point of the policy is lost).
func checkNetworkPolicy(o *object, np *networkingv1.NetworkPolicy, templates []podTemplate, p *problems) {
	who := o.String()
	selector, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		p.add(who, "spec.podSelector", "%v", err)
		return
	}
	if selector.Empty() {
		p.add(who, "spec.podSelector", "empty: it selects every pod of the namespace, not the worker's")
		return
	}
	var selected []podTemplate
	for _, t := range templates {
		if t.owner.namespace == o.namespace && selector.Matches(labels.Set(t.labels)) {
			selected = append(selected, t)
		}
	}
	if len(selected) == 0 {
		p.add(who, "spec.podSelector", "selects the pods of no workload in the manifests (%s)", selector)
		return
	}
	for i, rule := range np.Spec.Ingress {
		field := fmt.Sprintf("spec.ingress[%d]", i)
		if len(rule.From) == 0 {
			p.add(who, field+".from", "empty: the rule admits every source; name Prometheus's "+
				"(namespaceSelector and podSelector)")
		}
		for j, peer := range rule.From {
			everyNamespace := peer.NamespaceSelector != nil && len(peer.NamespaceSelector.MatchLabels) == 0 &&
				len(peer.NamespaceSelector.MatchExpressions) == 0
			everyPod := peer.PodSelector == nil || (len(peer.PodSelector.MatchLabels) == 0 &&
				len(peer.PodSelector.MatchExpressions) == 0)
			if everyNamespace && everyPod {
				p.add(who, fmt.Sprintf("%s.from[%d]", field, j),
					"every pod of every namespace: name the namespace and the pods")
			}
		}
		for j, port := range rule.Ports {
			if port.Port == nil {
				p.add(who, fmt.Sprintf("%s.ports[%d].port", field, j), "missing: every port would be admitted")
				continue
			}
			for _, t := range selected {
				declared := false
				for k := range t.spec.Containers {
					if declaresPort(&t.spec.Containers[k], *port.Port) {
						declared = true
					}
				}
				if !declared {
					p.add(who, fmt.Sprintf("%s.ports[%d].port", field, j),
						"%s is not a port of the pods of %s (ports[].name or containerPort): it admits nothing",
						port.Port.String(), t.owner)
				}
			}
		}
	}
}

// checkAdmitted: the worker's pods are selected by a NetworkPolicy that restricts their ingress;
// without one, any pod of the cluster can open connections to the HTTP port.
func checkAdmitted(o *object, sts *appsv1.StatefulSet, objects []*object, p *problems) {
	for _, other := range objects {
		np, ok := other.value.(*networkingv1.NetworkPolicy)
		if !ok || other.namespace != o.namespace {
			continue
		}
		selector, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !selector.Matches(labels.Set(sts.Spec.Template.Labels)) {
			continue
		}
		for _, t := range np.Spec.PolicyTypes {
			if t == networkingv1.PolicyTypeIngress {
				return
			}
		}
		if len(np.Spec.PolicyTypes) == 0 { // the API's default: Ingress
			return
		}
	}
	p.add(o.String(), "spec.template.metadata.labels",
		"no NetworkPolicy restricts the ingress of these pods: any pod of the cluster can reach "+
			"the HTTP port (deploy/k8s/base/networkpolicy.yaml)")
}
