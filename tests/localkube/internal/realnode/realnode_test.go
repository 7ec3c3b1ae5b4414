package realnode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"valkey-operator.local/localkube/internal/layout"
)

// This machine's kind of mountinfo: cgroup v1 hierarchies beside an empty cgroup2 (hybrid).
const hybridMountinfo = `22 27 0:21 / /proc rw,relatime - proc proc rw
30 29 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
31 29 0:27 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
32 29 0:28 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
33 29 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
34 29 0:30 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
35 29 0:31 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
37 29 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
38 29 0:34 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
39 29 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

func TestParseCgroupMounts(t *testing.T) {
	mounts, err := parseCgroupMounts(strings.NewReader(hybridMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 9 {
		t.Fatalf("%d hierarchies, want 9: %+v", len(mounts), mounts)
	}
	if got := mounts[7]; got.Path != "/sys/fs/cgroup/systemd" || !reflect.DeepEqual(got.Controllers, []string{"name=systemd"}) {
		t.Errorf("named hierarchy: %+v", got)
	}
	if got := mounts[8]; got.Path != "/sys/fs/cgroup/unified" || !got.V2 {
		t.Errorf("cgroup2: %+v", got)
	}
	noV2 := func() (string, error) { t.Fatal("hybrid mode read cgroup.controllers"); return "", nil }
	if missing := missingControllers(mounts, noV2); len(missing) != 0 {
		t.Errorf("hybrid machine: missing %v", missing)
	}
	// Without the pids hierarchy, the check names it.
	without := strings.ReplaceAll(hybridMountinfo, "rw,pids", "rw,net_cls")
	mounts, _ = parseCgroupMounts(strings.NewReader(without))
	missing := missingControllers(mounts, noV2)
	if len(missing) != 1 || !strings.Contains(missing[0], "controller pids") {
		t.Errorf("missing = %v, want pids named", missing)
	}
}

func TestMissingControllersV2(t *testing.T) {
	mounts := []cgroupMount{{Path: "/sys/fs/cgroup", V2: true}}
	missing := missingControllers(mounts, func() (string, error) { return "cpuset cpu io memory\n", nil })
	if len(missing) != 1 || !strings.Contains(missing[0], "controller pids") {
		t.Errorf("missing = %v, want pids named", missing)
	}
}

func TestConfigs(t *testing.T) {
	l, err := layout.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var cni struct {
		Plugins []struct {
			Type   string `json:"type"`
			Bridge string `json:"bridge"`
			IPAM   struct {
				Ranges [][]map[string]string `json:"ranges"`
				Routes []map[string]string   `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	raw, err := CNIConfig(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cni); err != nil {
		t.Fatal(err)
	}
	br := cni.Plugins[0]
	if br.Type != "bridge" || br.Bridge != layout.Bridge || br.IPAM.Ranges[0][0]["subnet"] != "10.213.64.0/24" ||
		br.IPAM.Routes[0]["dst"] != "10.213.0.0/16" || br.IPAM.Routes[0]["gw"] != NodeIP {
		t.Errorf("CNI configuration: %s", raw)
	}
	// Every path the node writes is under its state directory (or the PKI it reads).
	for name, text := range map[string]string{"containerd": ContainerdConfig(l), "kubelet": KubeletConfig(l), "registry": RegistryConfig(l)} {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, word := range strings.Fields(line) {
				word = strings.Trim(word, `"',[]{}`)
				if strings.HasPrefix(word, "/") && !strings.HasPrefix(word, l.Dir) && word != CgroupRoot {
					t.Errorf("%s configuration names %s, outside %s", name, word, l.Dir)
				}
			}
		}
	}
	if !strings.Contains(KubeletConfig(l), "failCgroupV1: false") {
		t.Error("the kubelet must be allowed to run on cgroup v1")
	}
	// Pods resolve names with localkube's CoreDNS, through the kube-dns Service.
	if !strings.Contains(KubeletConfig(l), `clusterDNS: ["10.0.0.10"]`) ||
		!strings.Contains(KubeletConfig(l), `clusterDomain: "cluster.local"`) {
		t.Errorf("the kubelet's cluster DNS:\n%s", KubeletConfig(l))
	}
	// Every destination the process kubelet routes through a pod's gateway, routed the same way.
	routes := map[string]string{}
	for _, r := range br.IPAM.Routes {
		routes[r["dst"]] = r["gw"]
	}
	for _, dst := range []string{layout.PodCIDR, layout.ServiceCIDR, layout.OutsideCIDR} {
		if routes[dst] != NodeIP {
			t.Errorf("no route to %s through %s: %s", dst, NodeIP, raw)
		}
	}
}

func TestImages(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"valkey.oci.tar": "", "valkey.refs": "valkey/valkey:9.1\n\n# comment\nvalkey/valkey:9\n",
		"norefs.oci.tar": "", "other.txt": "",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	images, err := Images([]string{dir, filepath.Join(dir, "absent")})
	if err != nil {
		t.Fatal(err)
	}
	want := []Image{{Archive: filepath.Join(dir, "valkey.oci.tar"), Refs: []string{"valkey/valkey:9.1", "valkey/valkey:9"}}}
	if !reflect.DeepEqual(images, want) {
		t.Errorf("Images = %+v, want %+v", images, want)
	}
}

func TestKubeletCmd(t *testing.T) {
	l, _ := layout.New("/x/.localkube")
	c := KubeletCmd(l)
	if c.Path != "unshare" || !strings.Contains(strings.Join(c.Args, " "), "--hostname-override="+NodeName) {
		t.Errorf("kubelet command: %s %v", c.Path, c.Args)
	}
	if nodeHost() != NodeIP+"/16" {
		t.Errorf("node address %s", nodeHost())
	}
}
