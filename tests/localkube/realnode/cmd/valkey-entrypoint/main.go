// Command valkey-entrypoint is the entrypoint of the Valkey images built here, doing what the
// official valkey/valkey image's entrypoint does for a container started without a command of
// its own, without needing a shell in the image:
//
//   - arguments that start with "-" or name a ".conf" file are valkey-server's;
//   - valkey-server started as root first gives the working directory's files (the /data volume)
//     to the valkey user, then drops to that user (uid and gid 999, no supplementary groups);
//   - the default umask 0022 becomes 0077, so the server's files are its own;
//   - $VALKEY_EXTRA_FLAGS, split on white space, goes after the arguments.
//
// A pod that names its command (the operator's do: valkey-server and its config file) does not
// run it.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	server   = "valkey-server"
	valkeyID = 999
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "valkey-entrypoint: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	args = command(args)
	if len(args) == 0 {
		return fmt.Errorf("no command (the image's CMD is %s)", server)
	}
	if args[0] == server && os.Getuid() == 0 {
		if err := giveToValkey("."); err != nil {
			return err
		}
		if err := dropToValkey(); err != nil {
			return err
		}
	}
	if old := syscall.Umask(0o077); old != 0o022 {
		syscall.Umask(old)
	}
	args = append(args, strings.Fields(os.Getenv("VALKEY_EXTRA_FLAGS"))...)
	path, err := exec.LookPath(args[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, args, os.Environ())
}

// command puts valkey-server in front of arguments that are only its options or config file.
func command(args []string) []string {
	if len(args) > 0 && (strings.HasPrefix(args[0], "-") || strings.HasSuffix(args[0], ".conf")) {
		return append([]string{server}, args...)
	}
	return args
}

// giveToValkey makes the valkey user own every file under dir that it does not own yet (the
// group stays), as a volume that was written by root or another image needs.
func giveToValkey(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || st.Uid == valkeyID {
			return nil
		}
		return os.Lchown(path, valkeyID, -1)
	})
}

func dropToValkey() error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(valkeyID); err != nil {
		return fmt.Errorf("setgid %d: %w", valkeyID, err)
	}
	if err := syscall.Setuid(valkeyID); err != nil {
		return fmt.Errorf("setuid %d: %w", valkeyID, err)
	}
	return nil
}
