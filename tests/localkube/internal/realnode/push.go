package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"valkey-operator.local/localkube/internal/layout"
)

// Image is one OCI archive and the references it is pushed as (NAME.oci.tar and NAME.refs, as
// realnode/oci.sh writes them).
type Image struct {
	Archive string
	Refs    []string
}

// Images lists the archives in dirs that have their references beside them.
func Images(dirs []string) ([]Image, error) {
	var out []Image
	for _, d := range dirs {
		archives, err := filepath.Glob(filepath.Join(d, "*.oci.tar"))
		if err != nil {
			return nil, err
		}
		for _, a := range archives {
			refs, err := readRefs(strings.TrimSuffix(a, ".oci.tar") + ".refs")
			if err != nil {
				return nil, err
			}
			if len(refs) > 0 {
				out = append(out, Image{Archive: a, Refs: refs})
			}
		}
	}
	return out, nil
}

func readRefs(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var refs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if r := strings.TrimSpace(sc.Text()); r != "" && !strings.HasPrefix(r, "#") {
			refs = append(refs, r)
		}
	}
	return refs, sc.Err()
}

// Push pushes every image in the real node's image directories into its registry, under each of
// its references (crane push, from the Go module proxy's go-containerregistry: a blob the
// registry already has is not sent again, so pushing unchanged images costs a few requests).
func Push(ctx context.Context, l layout.Layout, logf func(string, ...any)) error {
	images, err := Images(For(l).ImageDirs())
	if err != nil {
		return err
	}
	if len(images) == 0 {
		return fmt.Errorf("no image to push in %s (make realnode-images builds them)", strings.Join(For(l).ImageDirs(), ", "))
	}
	t0 := time.Now()
	for _, img := range images {
		if err := PushImage(ctx, l, img); err != nil {
			return err
		}
	}
	logf("real node: %d images pushed into %s in %s", len(images), RegistryAddr, time.Since(t0).Round(time.Millisecond))
	return nil
}

// PushImage unpacks one archive (an OCI layout, which crane pushes) and pushes it.
func PushImage(ctx context.Context, l layout.Layout, img Image) error {
	work, err := os.MkdirTemp("", "localkube-push-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if out, err := exec.CommandContext(ctx, "tar", "-xf", img.Archive, "-C", work).CombinedOutput(); err != nil {
		return fmt.Errorf("unpacking %s: %v: %s", img.Archive, err, out)
	}
	crane := For(l).Bin("crane")
	for _, ref := range img.Refs {
		out, err := exec.CommandContext(ctx, crane, "push", "--insecure", work, RegistryAddr+"/"+ref).CombinedOutput()
		if err != nil {
			return fmt.Errorf("crane push %s as %s: %v: %s", img.Archive, ref, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// RegistryReady reports whether the registry answers its API's base endpoint.
func RegistryReady(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+RegistryAddr+"/v2/", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /v2/: %s", resp.Status)
	}
	return nil
}

// ContainerdReady reports whether containerd accepts connections on its socket.
func ContainerdReady(ctx context.Context, l layout.Layout) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", For(l).ContainerdSocket())
	if err != nil {
		return err
	}
	return c.Close()
}
