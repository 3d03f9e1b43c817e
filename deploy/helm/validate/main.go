// Command validate reads `helm template` output on stdin and decodes every manifest
// strictly into the Kubernetes API types it names (k8s.io/api) or the prometheus-operator
// types (ServiceMonitor, PrometheusRule): an unknown field, a duplicate field, a value of
// the wrong type or an unknown kind fails, naming the document. No cluster is needed.
// What it does not check: the API server's semantic validation (required fields, ranges);
// see tests/helm_chart.rs, which runs it on every documented value set.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

func main() {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, monitoringv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			fmt.Fprintf(os.Stderr, "validate: building the scheme: %v\n", err)
			os.Exit(2)
		}
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	failed, checked := 0, 0
	for {
		document, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "validate: reading the manifests: %v\n", err)
			os.Exit(2)
		}
		if len(bytes.TrimSpace(stripComments(document))) == 0 {
			continue
		}
		checked++
		object, kind, err := decoder.Decode(document, nil, nil)
		if err != nil {
			failed++
			fmt.Printf("INVALID %s\n  %v\n", describe(document), err)
			continue
		}
		fmt.Printf("ok      %s %T\n", kind.Kind, object)
	}
	fmt.Printf("%d manifests checked, %d invalid\n", checked, failed)
	if failed > 0 || checked == 0 {
		os.Exit(1)
	}
}

// stripComments drops whole-line YAML comments (helm's `# Source:` lines).
func stripComments(document []byte) []byte {
	var kept []string
	for _, line := range strings.Split(string(document), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			kept = append(kept, line)
		}
	}
	return []byte(strings.Join(kept, "\n"))
}

// describe names a document by its `# Source:` line and kind for an error message.
func describe(document []byte) string {
	source, kind := "?", "?"
	for _, line := range strings.Split(string(document), "\n") {
		if rest, ok := strings.CutPrefix(line, "# Source: "); ok {
			source = rest
		}
		if rest, ok := strings.CutPrefix(line, "kind: "); ok && kind == "?" {
			kind = rest
		}
	}
	return fmt.Sprintf("%s (%s)", kind, source)
}
