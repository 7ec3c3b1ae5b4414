package supervisor

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"valkey-operator.local/localkube/internal/layout"
	"valkey-operator.local/localkube/internal/pki"
)

// AdminHTTPClient is an HTTPS client with the admin certificate that trusts the cluster CA.
func AdminHTTPClient(l layout.Layout) (*http.Client, error) {
	caPEM, err := os.ReadFile(l.PKIFile(pki.CACert))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no certificate", l.PKIFile(pki.CACert))
	}
	cert, err := tls.LoadX509KeyPair(l.PKIFile(pki.AdminCert), l.PKIFile(pki.AdminKey))
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}},
	}, nil
}

// selfSignedClient probes the controller manager's and scheduler's health endpoints, whose
// serving certificates they generate in memory; /healthz is readable without credentials.
func selfSignedClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // loopback probe of a certificate made at start-up
		}},
	}
}

// probe GETs url and returns nil when it answers 200 with a body containing want.
func probe(ctx context.Context, c *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// waitFor polls check until it succeeds, the deadline passes, ctx ends, or the child exits.
func waitFor(ctx context.Context, what string, timeout time.Duration, c *child, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(pctx)
		cancel()
		if last == nil {
			return nil
		}
		if c != nil && !c.running() {
			return fmt.Errorf("%s exited while waiting for %s (see %s)", c.name, what, c.logPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// CoreDNSReadyURL answers 200 "OK" once CoreDNS's kubernetes plugin has synced.
var CoreDNSReadyURL = "http://127.0.0.1:" + strconv.Itoa(layout.DNSReadyPort) + "/ready"

// proxyMetricsURL is kube-proxy's metrics endpoint (plain HTTP on loopback).
var proxyMetricsURL = "http://127.0.0.1:" + strconv.Itoa(layout.ProxyMetricsPort) + "/metrics"

// ProxySynced returns nil once kube-proxy has written its IPv4 rules at least once: its metric of
// the last sync has a sample. (Its /healthz is already OK while it waits for its first sync.)
func ProxySynced(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxyMetricsURL, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", proxyMetricsURL, resp.Status)
	}
	return proxySyncedIn(resp.Body)
}

func proxySyncedIn(r io.Reader) error {
	const metric = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") || !strings.Contains(line, `ip_family="IPv4"`) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil && v > 0 {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("kube-proxy has not synced its rules yet")
}
