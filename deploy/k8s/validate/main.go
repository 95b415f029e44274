// Command validate checks the rendered Kubernetes manifests of transcript-owner.
//
//	kubectl kustomize deploy/k8s/overlays/production | go run ./deploy/k8s/validate -production
//
// It reads a multi-document YAML stream on stdin (the output of `kubectl kustomize`) and
// decodes every object strictly into the k8s.io/api type for its apiVersion and kind, as the
// API server would: unknown fields, duplicate fields and wrong types are errors, and so is a
// kind it does not know. The API version is the one go.mod pins (k8s.io/api v0.32: Kubernetes
// 1.32, the oldest cluster the manifests target), so a field added in a later release is
// rejected too. Then it applies the rules this deployment depends on (rules.go).
//
// Each problem is printed on stderr as "<Kind> <namespace>/<name>: <field>: <problem>"; the exit
// status is 1 if there is any, 2 if stdin cannot be read. On success it prints one line per
// Secret the manifests reference but do not contain (the Secrets an operator must create).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kinds maps every apiVersion/kind the validator accepts to a new typed object. A kind that
// is not here is an error: add it (from k8s.io/api) when the manifests start using it.
var kinds = map[schema.GroupVersionKind]func() any{
	{Version: "v1", Kind: "Namespace"}:                                       func() any { return &corev1.Namespace{} },
	{Version: "v1", Kind: "ConfigMap"}:                                       func() any { return &corev1.ConfigMap{} },
	{Version: "v1", Kind: "Secret"}:                                          func() any { return &corev1.Secret{} },
	{Version: "v1", Kind: "Service"}:                                         func() any { return &corev1.Service{} },
	{Version: "v1", Kind: "ServiceAccount"}:                                  func() any { return &corev1.ServiceAccount{} },
	{Version: "v1", Kind: "PersistentVolumeClaim"}:                           func() any { return &corev1.PersistentVolumeClaim{} },
	{Group: "apps", Version: "v1", Kind: "StatefulSet"}:                      func() any { return &appsv1.StatefulSet{} },
	{Group: "apps", Version: "v1", Kind: "Deployment"}:                       func() any { return &appsv1.Deployment{} },
	{Group: "batch", Version: "v1", Kind: "Job"}:                             func() any { return &batchv1.Job{} },
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}:            func() any { return &policyv1.PodDisruptionBudget{} },
	{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"}:       func() any { return &networkingv1.NetworkPolicy{} },
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}:        func() any { return &rbacv1.Role{} },
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}: func() any { return &rbacv1.RoleBinding{} },
}

// object is one decoded document of the stream.
type object struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	value     any // a pointer to the k8s.io/api type
}

func (o *object) String() string {
	ns := o.namespace
	if ns == "" {
		ns = "(no namespace)"
	}
	return fmt.Sprintf("%s %s/%s", o.gvk.Kind, ns, o.name)
}

// problems collects every error of a run; nothing stops at the first.
type problems struct{ lines []string }

func (p *problems) add(who string, field string, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	p.lines = append(p.lines, who+": "+msg)
}

func main() {
	production := flag.Bool("production", false,
		"production rules too: no Secret carries data (they are created by the operator), "+
			"every image is pinned (a tag other than latest, or a digest)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(),
			"usage: kubectl kustomize DIR | validate [-production]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: reading stdin: %v\n", err)
		os.Exit(2)
	}
	var p problems
	objects := decodeStream(input, &p)
	decoded := len(p.lines) == 0
	if len(objects) == 0 && decoded {
		p.add("stdin", "", "no Kubernetes object in the input")
	}
	var expected []string
	if decoded {
		// The rules look across objects (selectors, references): on a stream that did not
		// decode whole they would only report the objects that are missing.
		expected = checkRules(objects, *production, &p)
	}
	if len(p.lines) > 0 {
		for _, line := range p.lines {
			fmt.Fprintln(os.Stderr, line)
		}
		if !decoded {
			fmt.Fprintln(os.Stderr, "(the deployment rules are checked once every object decodes)")
		}
		fmt.Fprintf(os.Stderr, "%d problem(s)\n", len(p.lines))
		os.Exit(1)
	}
	fmt.Printf("ok: %d objects\n", len(objects))
	for _, line := range expected {
		fmt.Println(line)
	}
}

// decodeStream splits the stream into documents and decodes each strictly.
func decodeStream(input []byte, p *problems) []*object {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(input)))
	var objects []*object
	seen := map[string]int{}
	for index := 1; ; index++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.add(fmt.Sprintf("document %d", index), "", "unreadable: %v", err)
			break
		}
		obj := decodeDocument(doc, index, p)
		if obj == nil {
			continue
		}
		key := obj.String()
		if first, dup := seen[key]; dup {
			p.add(key, "", "declared twice (documents %d and %d)", first, index)
		}
		seen[key] = index
		objects = append(objects, obj)
	}
	return objects
}

// decodeDocument returns nil for an empty document or one that does not decode.
func decodeDocument(doc []byte, index int, p *problems) *object {
	// A lenient look at the header first, to name the object in every later message.
	loose, err := yaml.YAMLToJSON(doc)
	if err != nil {
		p.add(fmt.Sprintf("document %d", index), "", "invalid YAML: %v", err)
		return nil
	}
	if string(bytes.TrimSpace(loose)) == "null" {
		return nil // only comments or nothing between two '---'
	}
	var header struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(loose, &header); err != nil {
		p.add(fmt.Sprintf("document %d", index), "", "not a Kubernetes object: %v", err)
		return nil
	}
	gv, err := schema.ParseGroupVersion(header.APIVersion)
	if err != nil {
		p.add(fmt.Sprintf("document %d", index), "apiVersion", "%v", err)
		return nil
	}
	obj := &object{gvk: gv.WithKind(header.Kind), namespace: header.Metadata.Namespace,
		name: header.Metadata.Name}
	who := obj.String()
	if header.APIVersion == "" || header.Kind == "" {
		p.add(fmt.Sprintf("document %d", index), "", "apiVersion and kind are required")
		return nil
	}
	if obj.name == "" {
		p.add(who, "metadata.name", "required")
	}
	newValue, known := kinds[obj.gvk]
	if !known {
		p.add(who, "", "unknown apiVersion/kind %s %s (the validator knows: %s)",
			header.APIVersion, header.Kind, knownKinds())
		return nil
	}
	// Strict YAML first (a key twice in one mapping), with no target type: like kubectl, a
	// YAML number stays a number, so `value: 30` for a string field is the API server's error.
	strict, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		p.add(who, "", "invalid YAML: %v", err)
		return nil
	}
	obj.value = newValue()
	strictErrs, err := kjson.UnmarshalStrict(strict, obj.value,
		kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		if paths := badQuantities(strict); len(paths) > 0 {
			// resource.Quantity's own error does not say where it is
			for _, q := range paths {
				p.add(who, q, "not a quantity (e.g. 500m, 2, 512Mi, 4Gi)")
			}
		} else {
			p.add(who, "", "%s", typeError(err))
		}
		return nil
	}
	for _, e := range strictErrs {
		p.add(who, "", "%v", e)
	}
	if len(strictErrs) > 0 {
		return nil
	}
	return obj
}

// typeError keeps the decoder's message, which names the field by its JSON path
// ("cannot unmarshal string into Go struct field StatefulSetSpec.spec.replicas of type int32").
func typeError(err error) string {
	return "does not decode: " + strings.TrimPrefix(err.Error(), "json: ")
}

// badQuantities finds the values of requests, limits and sizeLimit that do not parse as a
// resource.Quantity, by their JSON path.
func badQuantities(doc []byte) []string {
	var tree any
	if json.Unmarshal(doc, &tree) != nil {
		return nil
	}
	var bad []string
	var walk func(path string, node any)
	walk = func(path string, node any) {
		switch v := node.(type) {
		case map[string]any:
			for k, child := range v {
				walk(path+"."+k, child)
			}
		case []any:
			for i, child := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), child)
			}
		default:
			last := path[strings.LastIndex(path, ".")+1:]
			quantity := last == "sizeLimit" || strings.HasSuffix(path, ".requests."+last) ||
				strings.HasSuffix(path, ".limits."+last)
			if !quantity {
				return
			}
			text := fmt.Sprint(v)
			if s, ok := v.(string); ok {
				text = s
			}
			if _, err := resource.ParseQuantity(text); err != nil {
				bad = append(bad, strings.TrimPrefix(path, "."))
			}
		}
	}
	walk("", tree)
	sort.Strings(bad)
	return bad
}

func knownKinds() string {
	var names []string
	for gvk := range kinds {
		names = append(names, strings.TrimPrefix(gvk.GroupVersion().String()+" "+gvk.Kind, "/"))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
