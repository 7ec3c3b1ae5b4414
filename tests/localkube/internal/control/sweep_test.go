package control

import "testing"

func TestMentions(t *testing.T) {
	dir := "/repo/.localkube"
	cases := []struct {
		args []string
		want bool
	}{
		{[]string{"--data-dir=/repo/.localkube/etcd"}, true},
		{[]string{"--kubeconfig", "/repo/.localkube/kubeconfig"}, true},
		{[]string{"--dir", "/repo/.localkube"}, true},
		{[]string{"--data-dir", "/tmp/other/etcd"}, false},
		{[]string{"get", "pods"}, false},
		{[]string{"--dir=/repo/.localkube-other"}, false},
	}
	for _, c := range cases {
		if got := mentions(c.args, dir); got != c.want {
			t.Errorf("mentions(%v) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestReadinessStageNamesTheFirstUnmetCondition(t *testing.T) {
	errX := errString("x")
	cases := []struct {
		r         readiness
		wantNodes int
		component string
		ok        bool
	}{
		{readiness{readyz: errX}, 3, "apiserver", false},
		{readiness{readyNodes: 2}, 3, "kubelet", false},
		{readiness{readyNodes: 3, saErr: errX}, 3, "controller-manager", false},
		{readiness{readyNodes: 3, dnsErr: errX}, 3, "coredns", false},
		{readiness{readyNodes: 3, proxyErr: errX}, 3, "kube-proxy", false},
		{readiness{readyNodes: 3}, 3, "", true},
		{readiness{}, 0, "", true},
		// Without nodes there is no kube-proxy to wait for.
		{readiness{proxyErr: errX}, 0, "", true},
	}
	for _, c := range cases {
		_, comp, ok := c.r.stage(c.wantNodes)
		if comp != c.component || ok != c.ok {
			t.Errorf("%+v: stage = %q %v, want %q %v", c.r, comp, ok, c.component, c.ok)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestSupervisorDirFindsUpAndItsDirectory(t *testing.T) {
	cases := []struct {
		argv []string
		dir  string
		ok   bool
	}{
		{[]string{"/a/.localkube/bin/localkube", "up", "--dir", "/a/.localkube", "--kubelet", "k"}, "/a/.localkube", true},
		{[]string{"/b/.localkube/bin/localkube", "up", "--dir=/b/.localkube"}, "/b/.localkube", true},
		{[]string{"/b/.localkube/bin/localkube", "up", "--dir"}, "", false},
		{[]string{"/a/.localkube/bin/localkube", "etcd", "--data-dir", "/a/.localkube/etcd"}, "", false},
		{[]string{"/usr/bin/other", "up", "--dir", "/x"}, "", false},
		{[]string{"localkube"}, "", false},
	}
	for _, c := range cases {
		dir, ok := supervisorDir(c.argv)
		if dir != c.dir || ok != c.ok {
			t.Errorf("%v: %q %v, want %q %v", c.argv, dir, ok, c.dir, c.ok)
		}
	}
}
