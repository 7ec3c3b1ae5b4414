package supervisor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"valkey-operator.local/localkube/internal/layout"
)

// ObjectStoreEndpoint is where pods reach the object store (through its Service); the host
// reaches it at ObjectStoreHostURL.
var (
	ObjectStoreEndpoint = fmt.Sprintf("http://%s.%s.svc.%s", layout.ObjectStoreService, layout.ObjectStoreNamespace, layout.ClusterDomain)
	ObjectStoreHostURL  = fmt.Sprintf("http://%s:%d", layout.ObjectStoreAddr, layout.ObjectStorePort)
)

// objectStoreArgs runs versitygw's posix backend on the folder whose top folders are buckets.
func objectStoreArgs(l layout.Layout) []string {
	return []string{
		"--port", net.JoinHostPort(layout.ObjectStoreAddr, strconv.Itoa(layout.ObjectStorePort)),
		"--access", layout.ObjectStoreAccessKey,
		"--secret", layout.ObjectStoreSecretKey,
		"--quiet",
		"posix", l.ObjectStoreData(),
	}
}

// prepareObjectStore makes the data folder and its one bucket (a folder, for the posix backend).
func prepareObjectStore(l layout.Layout) error {
	if _, err := os.Stat(l.ObjectStore()); err != nil {
		return fmt.Errorf("object store: %w (make localkube-tools builds it: tests/objectstore/build.sh)", err)
	}
	return os.MkdirAll(filepath.Join(l.ObjectStoreData(), layout.ObjectStoreBucket), 0o755)
}

// objectStoreListening is the store's readiness: it accepts connections (every S3 request
// needs a signature, so there is no anonymous page to read).
func objectStoreListening(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(layout.ObjectStoreAddr, strconv.Itoa(layout.ObjectStorePort)))
	if err != nil {
		return err
	}
	return conn.Close()
}

// ensureObjectStoreObjects applies the object store's Service (port 80, no selector) and the
// EndpointSlice that points it at the store on the host, as kube-dns is pointed at CoreDNS, and
// the Secret with its credentials that examples and tests reference.
func ensureObjectStoreObjects(ctx context.Context, l layout.Layout) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns, name := layout.ObjectStoreNamespace, layout.ObjectStoreService
	labels := map[string]string{"app.kubernetes.io/name": "objectstore", "app.kubernetes.io/managed-by": "localkube"}
	svc := corev1ac.Service(name, ns).WithLabels(labels).WithSpec(corev1ac.ServiceSpec().
		WithType(corev1.ServiceTypeClusterIP).
		WithPorts(corev1ac.ServicePort().WithName("s3").WithProtocol(corev1.ProtocolTCP).WithPort(80).
			WithTargetPort(intstr.FromInt32(layout.ObjectStorePort))))
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if _, err := c.CoreV1().Services(ns).Apply(ctx, svc, opts); err != nil {
		return fmt.Errorf("service %s/%s: %w", ns, name, err)
	}
	slice := discoveryv1ac.EndpointSlice(name+"-localkube", ns).
		WithLabels(map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   "localkube",
		}).
		WithAddressType(discoveryv1.AddressTypeIPv4).
		WithEndpoints(discoveryv1ac.Endpoint().
			WithAddresses(layout.ObjectStoreAddr).
			WithConditions(discoveryv1ac.EndpointConditions().WithReady(true).WithServing(true).WithTerminating(false))).
		WithPorts(discoveryv1ac.EndpointPort().WithName("s3").WithProtocol(corev1.ProtocolTCP).WithPort(int32(layout.ObjectStorePort)))
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Apply(ctx, slice, opts); err != nil {
		return fmt.Errorf("endpointslice %s/%s: %w", ns, name, err)
	}
	secret := corev1ac.Secret(layout.ObjectStoreSecret, layout.ObjectStoreSecretNamespace).
		WithLabels(labels).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{
			"AWS_ACCESS_KEY_ID":     []byte(layout.ObjectStoreAccessKey),
			"AWS_SECRET_ACCESS_KEY": []byte(layout.ObjectStoreSecretKey),
			"endpoint":              []byte(ObjectStoreEndpoint),
			"bucket":                []byte(layout.ObjectStoreBucket),
		})
	// The default namespace is made by the API server itself, a moment after it serves.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = c.CoreV1().Secrets(layout.ObjectStoreSecretNamespace).Apply(ctx, secret, opts)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", layout.ObjectStoreSecretNamespace, layout.ObjectStoreSecret, err)
	}
	return nil
}
